"""The bottom of groupcoord: errors, log fields and the client security flags every other package shares.

It imports nothing else of ours, so node, client, raft, chaos, bench and the CLI can all depend on it and the
CLI stays at the top.
"""
