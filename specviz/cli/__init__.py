"""python -m specviz generate | replay | info | bench | profile | batch | train-heads | room | serve | serve-pair | probe — the
command-line face of the engine (docs/cli.md).

One module per subcommand, each with add_parser(sub) and run(args); terminal.py prints (every line escaped),
options.py maps RunConfig to flags and back, main.py builds the parser and dispatches.
"""

from specviz.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
