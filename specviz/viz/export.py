"""Exports for slides: the token stream as one standalone HTML file and the per-round table as CSV. Pure functions
(no streamlit); the step-through page offers them as downloads (specviz/ui/step_through/export_views.py).

The HTML file carries its styles inline on each element (no stylesheet, no script, no external resource), so it
opens the same anywhere, and a Content-Security-Policy forbids scripts on top of the escaping: every token text,
label and note is model output or user input and goes through html.escape (via specviz.viz.tokens)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from specviz.core.records import StepRecord
from specviz.viz.frames import rounds_frame
from specviz.viz.style import INK, MUTED_INK, PAPER
from specviz.viz.tokens import legend_html, token_stream_html

TokenText = Callable[[int], str]

# The CSV's columns, in order: the round's shape, its timings, the running statistics the charts draw, and the
# round's tokens (JSON lists of token texts, in the order the stream shows them).
ROUND_COLUMNS: tuple[str, ...] = (
    "run", "round", "k", "drafted", "accepted", "emitted", "bonus", "has_q",
    "draft_ms", "verify_ms", "round_ms", "tokens", "decode_ms",
    "acceptance_rate", "alpha", "tokens_per_target_pass", "theory_tokens_per_target_pass", "c", "speedup", "predicted_speedup",
    "drafted_tokens", "draft_fates", "emitted_tokens", "emitted_fates",
)  # fmt: skip
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"  # no script, no fetch: a file for slides
PAGE_STYLE = f"margin:2rem auto;max-width:62rem;padding:0 1rem;background:{PAPER};color:{INK};font-family:system-ui,-apple-system,'Segoe UI',sans-serif;"
H1_STYLE = "font-size:1.4rem;margin:0 0 .4rem 0;"
H2_STYLE = "font-size:1.1rem;margin:1.4rem 0 .2rem 0;"
NOTE_STYLE = f"margin:.1rem 0;color:{MUTED_INK};font-size:.9rem;"


def stream_document(
    prompt_texts: Sequence[str],
    streams: Mapping[str, pd.DataFrame],
    *,
    title: str = "specviz: speculative decoding, token by token",
    notes: Sequence[str] = (),
) -> str:
    """A complete HTML5 document: title, notes (one line each), the colour legend, then each run's stream.

    streams: run label -> specviz.viz.frames.stream_frame of that run (several in compare mode)."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP, quote=True)}">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{esc(title)}</title></head>",
        f'<body style="{PAGE_STYLE}">',
        f'<h1 style="{H1_STYLE}">{esc(title)}</h1>',
    ]
    parts += [f'<p style="{NOTE_STYLE}">{esc(note)}</p>' for note in notes]
    parts.append(legend_html())
    for label, stream in streams.items():
        if len(streams) > 1:
            parts.append(f'<h2 style="{H2_STYLE}">{esc(label)}</h2>')
        parts.append(token_stream_html(prompt_texts, stream))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def round_table(records: Sequence[StepRecord], run: str, token_text: TokenText, baseline: Sequence[StepRecord] = ()) -> pd.DataFrame:
    """One row per round with ROUND_COLUMNS: specviz.viz.frames.rounds_frame plus the round's token texts."""
    df = rounds_frame(records, run, baseline)

    def texts(ids: Sequence[int]) -> str:
        return json.dumps([token_text(int(t)) for t in ids], ensure_ascii=False)

    df["drafted_tokens"] = [texts(r.drafted) for r in records]
    df["draft_fates"] = [json.dumps(list(r.draft_fates)) for r in records]
    df["emitted_tokens"] = [texts(r.emitted) for r in records]
    df["emitted_fates"] = [json.dumps(list(r.emitted_fates)) for r in records]
    return df.loc[:, list(ROUND_COLUMNS)]


def _inert(value: object) -> object:
    """A spreadsheet runs a cell that starts with = + - @ (or a tab / CR before one) as a formula: quote it."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def rounds_csv(tables: Sequence[pd.DataFrame]) -> str:
    """The round tables of every run (round_table), stacked, as CSV text with a header row of ROUND_COLUMNS."""
    frames = [t.loc[:, list(ROUND_COLUMNS)] for t in tables if len(t)]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(ROUND_COLUMNS))
    for column in df.columns:
        if not pd.api.types.is_numeric_dtype(df[column]):
            df[column] = df[column].map(_inert)
    return df.to_csv(index=False, float_format="%.6g", lineterminator="\n")
