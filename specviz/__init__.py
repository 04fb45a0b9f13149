"""specviz: watch speculative decoding happen, token by token."""

__version__ = "0.1.0"
