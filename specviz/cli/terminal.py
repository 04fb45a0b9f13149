"""What the command line prints: every line through emit(), with control characters escaped (terminal_text), so
a token, title or message from a file or a model cannot clear the screen, retitle the window or plant a link;
tokens painted in their fate's colour; log lines escaped the same way."""

from __future__ import annotations

import logging
import re
import sys

ANSI = {"accepted": "\033[32m", "resampled": "\033[33m", "bonus": "\033[36m", "target": "\033[0m", "prompt": "\033[90m"}
RESET = "\033[0m"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but newline and tab, DEL, C1


def terminal_text(text: str) -> str:
    """text with every C0 and C1 control character but newline and tab written as an escape (ESC as \\x1b), so a
    token, title or message from a file or a model cannot clear the screen, retitle the window or plant a link."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def emit(text: object = "", *, err: bool = False, flush: bool = False, escaped: bool = False) -> None:
    """Every line the command line prints goes through here: to stdout (or stderr), control characters escaped.
    escaped=True: the text is already built from terminal_text() pieces plus our own colour codes (ANSI)."""
    line = str(text) if escaped else terminal_text(str(text))
    print(line, file=sys.stderr if err else sys.stdout, flush=flush)


class EscapingFormatter(logging.Formatter):
    """Log lines on stderr are printed text too: escaped like emit's."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_text(super().format(record))


def painted(text: str, kind: str) -> str:
    """text in the colour of its fate (or the prompt's), escaped, for emit(..., escaped=True)."""
    return ANSI[kind] + terminal_text(text) + RESET


def print_progress(done: int, total: int, message: str) -> None:
    """A long command's progress on stderr: [done/total] message."""
    emit(f"[{done}/{total}] {message}", err=True, flush=True)


def stats_line(mode: str, s) -> str:
    """One run's numbers (a specviz.core.metrics.RunMetrics) on one line: what generate and replay print."""
    acc = "n/a" if s.acceptance_rate is None else f"{s.acceptance_rate:.2f}"
    alpha = "n/a" if s.alpha is None else f"{s.alpha:.2f}"
    per_pass = "n/a" if s.tokens_per_target_pass is None else f"{s.tokens_per_target_pass:.2f}"
    return (
        f"[{mode}] {s.new_tokens} tokens in {s.wall_s:.2f}s = {s.tokens_per_s:.1f} tok/s; "
        f"{per_pass} tokens/target pass; accepted/drafted {acc}; alpha (E[sum min(p,q)]) {alpha}"
    )
