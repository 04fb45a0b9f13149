"""python -m specviz serve-pair: the room exercise, two services (one speculating, which one hidden) started as two
`serve` processes, and the truth written for the reveal (specviz.workshop.pair, docs/workshop.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specviz.cli.options import add_run_options
from specviz.cli.serve import add_service_options, service_config
from specviz.cli.terminal import emit
from specviz.drafters.specs import SPECULATIVE_KINDS


def add_parser(sub) -> None:
    """Register `serve-pair` on the CLI's subparsers."""
    p = sub.add_parser("serve-pair", help="the room exercise: two services, one speculating, which one hidden (docs/workshop.md)")
    add_run_options(p, only=("drafter",), differ={"drafter": {"choices": SPECULATIVE_KINDS, "default": "lookup", "help": "the speculating one's drafter (default lookup)"}})
    p.add_argument("--port", type=int, default=8001, help="service A listens here, service B on the next port (default 8001)")
    p.add_argument("--run-dir", default=None, help="a run directory to write the truth to for the reveal (default: the room's store: SPECVIZ_STORE, else SPECVIZ_RUN_DIR)")
    p.add_argument("--public-host", default=None, help="the address the app reaches them at, for the printed SPECVIZ_PROBE_URLS (default: --host)")
    add_service_options(p)


def _service_argv(args: argparse.Namespace) -> list[str]:
    """The service options of a parsed serve-pair command line, written out again for each `serve` it starts."""
    probe = argparse.ArgumentParser(add_help=False)
    add_service_options(probe)
    argv: list[str] = []
    for action in probe._actions:
        value = getattr(args, action.dest)
        if isinstance(action, argparse._StoreTrueAction):
            argv += [action.option_strings[0]] if value else []
        elif value is not None and action.dest not in ("host", "model_id"):
            argv += [action.option_strings[0], str(value)]
    return argv


def run(args: argparse.Namespace) -> int:
    import secrets

    from specviz.workshop.pair import run_pair
    from specviz.workshop.race_room import Pair, RaceRoom
    from specviz.workshop.service.config import served_name
    from specviz.workshop.store import open_store

    service_config(args, args.drafter, True)  # every option checked before anything starts
    if not 1 <= args.port <= 65534:
        raise ValueError(f"--port must leave room for a second service on the next port; got {args.port}.")
    model_id = args.model_id or served_name(args.target)
    speculating = secrets.randbelow(2)  # 0: service A speculates
    drafters = [args.drafter if i == speculating else "none" for i in range(2)]
    ports = [args.port, args.port + 1]
    public = args.public_host or args.host
    roots = [f"http://{args.host}:{port}" for port in ports]
    commands = [[sys.executable, "-m", "specviz", "serve", "--drafter", d, "--port", str(port), "--host", args.host, "--hide-truth",
                 "--model-id", model_id, *_service_argv(args)] for d, port in zip(drafters, ports)]  # fmt: skip
    pair = Pair.new((f"http://{public}:{ports[0]}/v1", f"http://{public}:{ports[1]}/v1"), speculating, args.drafter)
    room = RaceRoom(Path(args.run_dir).expanduser() if args.run_dir else open_store())  # SPECVIZ_STORE, else the run directory
    return run_pair(commands, roots, pair, room, emit)
