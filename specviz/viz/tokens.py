"""The token stream as HTML: prompt greyed, each committed token coloured by its fate, thrown-away drafts struck
through where they were thrown away. Every token string is model output or user input: html-escaped here."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import pandas as pd

WHITESPACE_MARKS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}

# kind -> (legend label, what it means, inline style). Colours are translucent so both themes read them.
FATES: dict[str, tuple[str, str, str]] = {
    "accepted": ("accepted draft", "drafted and kept: u < min(1, p/q)", "background:rgba(46,160,67,.30);"),
    "resampled": ("resampled", "drawn from the residual max(0, p - q) after a rejection", "background:rgba(230,140,20,.40);"),
    "bonus": ("bonus", "free extra token from p_target after every draft was kept", "background:rgba(40,120,220,.32);"),
    "target": ("target step", "plain target sample: nothing was drafted this round", "background:rgba(128,128,128,.16);"),
    "rejected": ("rejected draft", "the first draft the rule turned down (u >= min(1, p/q))", "color:#d23c3c;text-decoration:line-through;text-decoration-thickness:2px;"),
    "discarded": ("discarded draft", "drafted after a rejection: never checked, thrown away", "color:rgba(210,60,60,.55);text-decoration:line-through;"),
}
PROMPT_STYLE = "color:rgba(128,128,128,.85);"
TOKEN_STYLE = "border-radius:3px;padding:1px 1px;margin:0 1px 0 0;white-space:pre-wrap;"
ROUND_START_STYLE = "box-shadow:-2px 0 0 rgba(128,128,128,.55);margin-left:3px;"
MARK_STYLE = "opacity:.45;"
BOX_STYLE = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:0.92rem;line-height:2.0;word-break:break-word;"


def visible_plain(text: str) -> str:
    """Whitespace shown as markers (␣ ↵ ⇥), for chart labels. Not escaped."""
    return "".join(WHITESPACE_MARKS.get(ch, ch) for ch in text)


def visible_html(text: str) -> str:
    """Escaped HTML with whitespace markers; a newline marker is followed by a real line break."""
    out = []
    for ch in text:
        mark = WHITESPACE_MARKS.get(ch)
        if mark is None:
            out.append(html.escape(ch))
        else:
            out.append(f'<span style="{MARK_STYLE}">{mark}</span>' + ("<br>" if ch == "\n" else ""))
    return "".join(out)


def _fmt(x: float | None) -> str | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return f"{x:.3f}" if x == 0 or abs(x) >= 1e-3 else f"{x:.1e}"


def token_tooltip(row: pd.Series | dict) -> str:
    """Plain-text hover for one stream row: fate, round, p_target, q_draft, min(1, p/q), u."""
    kind = row["kind"]
    lines = [f"{FATES[kind][0]} · round {int(row['round'])}", f"token {row['text']!r} (id {int(row['token_id'])})"]
    p, q, a, u, res = (_fmt(row.get(c)) for c in ("p_target", "q_draft", "accept_prob", "uniform", "residual"))
    if p is not None:
        lines.append(f"p_target = {p}")
    if kind in ("accepted", "rejected", "discarded"):
        q_note = "" if row.get("has_q", True) else " (drafter gives no distribution: one-hot)"
        lines.append(f"q_draft = {q}{q_note}")
        lines.append(f"min(1, p/q) = {a}")
        lines.append(f"u = {u}" + (" (not checked: an earlier draft was rejected)" if kind == "discarded" else ""))
    if kind == "resampled" and res is not None:
        lines.append(f"residual prob = {res}")
    return "\n".join(lines)


def token_span(text: str, style: str, title: str | None = None, mark_whitespace: bool = True) -> str:
    title_attr = f' title="{html.escape(title, quote=True)}"' if title else ""
    body = visible_html(text) if mark_whitespace else html.escape(text)
    return f'<span style="{TOKEN_STYLE}{style}"{title_attr}>{body}</span>'


def token_stream_html(prompt_texts: Sequence[str], stream: pd.DataFrame, *, show_prompt: bool = True) -> str:
    """prompt_texts: the prompt's token strings; stream: specviz.viz.frames.stream_frame. Returns one <div>."""
    parts = [f'<div class="specviz-stream" style="{BOX_STYLE}">']
    if show_prompt:
        parts.extend(token_span(t, PROMPT_STYLE, "prompt") for t in prompt_texts)
    for row in stream.to_dict("records"):
        style = FATES[row["kind"]][2] + (ROUND_START_STYLE if row["first_in_round"] else "")
        parts.append(token_span(row["text"], style, token_tooltip(row)))
    parts.append("</div>")
    return "".join(parts)


def legend_html(kinds: Sequence[str] = tuple(FATES)) -> str:
    """One swatch per fate, each with its meaning on hover; plus the prompt and the round marker."""
    items = [token_span("prompt", PROMPT_STYLE, "the prompt (context, not generated)", False)]
    items += [token_span(FATES[k][0], FATES[k][2], FATES[k][1], False) for k in kinds]
    items.append(token_span("new round", ROUND_START_STYLE, "a thin bar marks where each round's tokens start", False))
    items.append(token_span("␣ space ↵ newline", MARK_STYLE, "whitespace is drawn so token boundaries show", False))
    return f'<div class="specviz-legend" style="{BOX_STYLE}font-size:0.85rem;">' + " ".join(items) + "</div>"
