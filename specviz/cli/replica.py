"""python -m specviz replica: one app replica on a worker machine, for a room whose balancer runs elsewhere
(`specviz room --backend HOST:PORT`); the checks and the environment are specviz.workshop.replicas.worker's (docs/rooms.md)."""

from __future__ import annotations

import argparse
import os
import sys

from specviz.cli.terminal import emit
from specviz.workshop.replicas.balancer import RoomError
from specviz.workshop.replicas.worker import exec_replica, worker_env


def add_parser(sub) -> None:
    """Register `replica` on the CLI's subparsers."""
    p = sub.add_parser("replica", help="one app replica on a worker, for a room's balancer on another host (room --backend)")
    p.add_argument("--port", type=int, default=8501, help="where the replica listens (default 8501)")
    p.add_argument("--bind", default="0.0.0.0", help="the replica's address (default 0.0.0.0: the balancer is on another host)")
    p.add_argument("--trusted-proxy", action="append", default=[], metavar="ADDR", help="the balancer's address or network, as this replica sees it (repeat; added to SPECVIZ_TRUSTED_PROXIES)")
    p.add_argument("--id", help="the name the page and the log show for this replica (default HOST:PORT)")
    p.add_argument("streamlit_args", nargs="*", help="after --: extra `streamlit run` flags")


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        emit(f"error: --port {args.port} is not a port.", err=True)
        return 2
    try:
        env, warnings = worker_env(os.environ, args.bind, args.port, args.trusted_proxy, args.id)
    except RoomError as exc:
        emit(f"error: {exc}", err=True)
        return 2
    for warning in warnings:
        emit(f"warning: {warning}", err=True)
    emit(f"specviz replica {env['SPECVIZ_REPLICA_ID']}: on {args.bind}:{args.port}, shared mode", err=True)
    sys.stderr.flush()
    exec_replica(args.bind, args.port, env, args.streamlit_args)
    return 0  # not reached: exec_replica replaces this process
