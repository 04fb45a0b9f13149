"""specviz: watch speculative decoding happen, token by token."""

__version__ = "0.5.0"
