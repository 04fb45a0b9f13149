"""python -m specviz replay: a recording's coloured stream and stats, from the file alone (no model, no tokenizer)."""

from __future__ import annotations

import argparse
import sys

from specviz.cli.terminal import emit, painted, stats_line, terminal_text


def add_parser(sub) -> None:
    """Register `replay` on the CLI's subparsers."""
    rep = sub.add_parser("replay", help="print a recording's coloured stream and stats; loads no model")
    rep.add_argument("file", help="a recording written by generate --record or the app's Save run")


def run(args: argparse.Namespace) -> int:
    """Print each recorded run as the generate command would have, from the file alone (no model, no tokenizer)."""
    from specviz.recording.load import read_recording
    from specviz.viz.tokens import join_pieces

    rec = read_recording(args.file)
    tty = sys.stdout.isatty()
    emit(f"recording: {rec.title or args.file}; {rec.describe()}", err=tty)
    prompt = "".join(text for _, _, text in join_pieces([rec.token_text(t) for t in rec.prompt_ids]))
    for run in rec.runs:
        tokens = [(t, f) for r in run.records for t, f in zip(r.emitted, r.emitted_fates)]
        groups = join_pieces([rec.token_text(t) for t, _ in tokens])
        if tty:
            body = "".join(painted(text, tokens[start][1]) for start, _, text in groups)
            emit(terminal_text(f"\n{run.label}:\n") + painted(prompt, "prompt") + body, escaped=True)
        else:
            emit(f"\n{run.label}:\n" + "".join(text for _, _, text in groups))
        if run.error:
            emit(f"[{run.label}] stopped by an error: {run.error}")
        emit(stats_line(run.label, run.metrics), err=tty)
    if rec.baseline is not None:
        emit(stats_line(rec.baseline.label, rec.baseline.metrics), err=tty)
    return 0
