"""specviz serve: the OpenAI-compatible service (server.py; split by responsibility next)."""
