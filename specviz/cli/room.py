"""python -m specviz room: N app replicas behind HAProxy, supervised, and any replicas on other hosts (--backend); the
room itself is plain Python in specviz.workshop.replicas (docs/rooms.md)."""

from __future__ import annotations

import argparse
import logging
import os

from specviz.cli.terminal import emit
from specviz.workshop.replicas.balancer import Backend, RoomError, conn_per_source, haproxy_config, parse_backend
from specviz.workshop.replicas.supervisor import Supervisor, default_replicas


def add_parser(sub) -> None:
    """Register `room` on the CLI's subparsers."""
    p = sub.add_parser("room", help="a room bigger than one process: N app replicas behind HAProxy, supervised")
    p.add_argument("--replicas", type=int, default=default_replicas(), help=f"Streamlit processes on this machine (default: half the cores, here {default_replicas()}; 0 with --backend)")
    p.add_argument("--port", type=int, default=8500, help="where the balancer listens (default 8500)")
    p.add_argument("--bind", default="127.0.0.1", help="the balancer's address (default loopback; 0.0.0.0 for a room)")
    p.add_argument("--status-file", help="keep {url, balancer_pid, replicas: [{id, port, pid}]} current in this JSON file")
    p.add_argument("--print-config", action="store_true", help="print the HAProxy configuration and exit (with --backend: for replicas on other hosts)")
    p.add_argument("--backend", action="append", default=[], metavar="HOST:PORT", help="a replica on another host, started there by `specviz replica` (repeat); with --print-config: the configuration for them")
    p.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS only, with this PEM file (certificate and unencrypted private key): the presenter key crosses the room's network")
    p.add_argument("streamlit_args", nargs="*", help="after --: extra `streamlit run` flags for every replica")


def run(args: argparse.Namespace) -> int:
    logging.getLogger("specviz.workshop.replicas").setLevel(logging.INFO)
    try:
        if args.print_config:
            backends = [parse_backend(b, i) for i, b in enumerate(args.backend)]
            backends = backends or [Backend(f"r{i + 1}", "127.0.0.1", 8501 + i) for i in range(max(1, args.replicas))]
            config = haproxy_config(args.bind, args.port, backends, args.tls_cert, conn_per_source(dict(os.environ)))
            emit(config.removesuffix("\n"))  # a ValueError: the CLI's "error: ..."
            return 0
        return Supervisor(args.replicas, args.port, args.bind, args.status_file, args.streamlit_args, args.tls_cert, args.backend).run()
    except RoomError as exc:
        emit(f"error: {exc}", err=True)
        return 2
