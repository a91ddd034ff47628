"""Generated stubs of groupcoord.v1 (run `python -m groupcoord.protocol.generate` to rebuild)."""
