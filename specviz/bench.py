"""The benchmark sweep (filled in by the benchmark issue)."""

from __future__ import annotations

import argparse


def add_bench_parser(sub) -> None:
    sub.add_parser("bench", help="sweep drafters, k and temperature over a prompt set (not yet available)")


def cmd_bench(args: argparse.Namespace) -> int:
    raise ValueError("bench is not implemented yet")
