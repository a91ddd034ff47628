"""Chaos harness: a local cluster, SDK workers that record histories, fault injection, and the checker."""
