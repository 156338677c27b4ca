"""The static half: libcst stream-flow analysis of Python source. Never imports torch."""
