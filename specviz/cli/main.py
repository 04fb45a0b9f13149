"""The dispatcher: one parser with a subparser per command module, and main(), which runs the chosen command and
turns a ValueError or OSError into `error: ...` on stderr and exit code 2."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from specviz import __version__
from specviz.cli import app, batch, bench, generate, info, probe, profile, replay, replica, room, serve, serve_pair, train_heads
from specviz.cli.terminal import EscapingFormatter, emit

# Each module registers its subcommand (add_parser) and runs it (run); help lists them in this order. A module's
# add_parser imports only what its defaults need (never transformers: `replay` loads no model).
COMMANDS = {
    "generate": generate, "replay": replay, "info": info, "bench": bench, "profile": profile, "batch": batch,
    "train-heads": train_heads, "app": app, "room": room, "replica": replica, "serve": serve, "serve-pair": serve_pair,
    "probe": probe,
}  # fmt: skip


def build_parser(prog: str = "python -m specviz") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Speculative decoding you can watch.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")  # specviz/__init__.py, the one place
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m specviz") -> int:
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(EscapingFormatter(logging.BASIC_FORMAT))
    logging.basicConfig(level=os.environ.get("SPECVIZ_LOG", "WARNING"), handlers=[handler])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["app"] and argv[1:2] not in (["-h"], ["--help"]):  # `app` passes every flag after it on to streamlit
        args = argparse.Namespace(command="app", streamlit_args=argv[1:])
    else:
        args = build_parser(prog).parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except (ValueError, OSError) as exc:
        emit(f"error: {exc}", err=True)
        return 2


def console() -> int:
    """The `specviz` command an install puts on the PATH (pyproject.toml's [project.scripts])."""
    return main(prog="specviz")
