"""python -m specviz app: `streamlit run app.py` with shared mode's guards installed before the server starts.

A plain `streamlit run app.py` runs no code of specviz's until a session's first script run, so until then a raw
client's BackMsgs and uploads reach Streamlit unfiltered (docs/workshop-safety.md). This command starts the app the
way a room's replica and the container do (specviz.workshop.replicas.supervisor.WARM_START: the guard, then Streamlit's
server), in this process, with any `streamlit run` flags passed on."""

from __future__ import annotations

import argparse
import os
import sys

from specviz.workshop.replicas.supervisor import REPO, WARM_START

APP = REPO / "app.py"


def add_parser(sub) -> None:
    """Register `app` on the CLI's subparsers."""
    p = sub.add_parser(
        "app", help="the app (`streamlit run app.py`), guarded for shared mode from the server's start: the way to open it to a room by hand",
        description="Runs `streamlit run app.py STREAMLIT_ARGS` after installing the guard on what participants send "
        "(specviz.ui.common.backmsgs), as a room's replicas and the container do. Example: "
        "python -m specviz app --server.address 0.0.0.0 --server.port 8501",
    )  # fmt: skip
    p.add_argument("streamlit_args", nargs="*", help="`streamlit run` flags, e.g. --server.address 0.0.0.0 --server.port 8501 (every argument after `app` goes to streamlit)")


def streamlit_argv(streamlit_args: list[str]) -> list[str]:
    """The command line this process becomes: WARM_START, then `run app.py` and the flags."""
    flags = streamlit_args[1:] if streamlit_args[:1] == ["--"] else streamlit_args
    return [sys.executable, "-c", WARM_START, "run", str(APP), *flags]


def run(args: argparse.Namespace) -> int:
    argv = streamlit_argv(list(args.streamlit_args))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)  # Streamlit's server in this process: SIGTERM and Ctrl-C reach it directly
    return 0  # not reached
