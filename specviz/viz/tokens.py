"""The token stream as HTML: prompt greyed, each committed token coloured by its fate, thrown-away drafts struck
through where they were thrown away. Every token string is model output or user input: html-escaped here.

Tokens that are pieces of a character (byte-level BPE splits `日` into two tokens) have no text of their own:
their text is their bytes, written ``⟨E6 97⟩`` (see piece_text). The stream joins consecutive pieces back into
the character they make, with the pieces on hover."""

from __future__ import annotations

import codecs
import html
import math
import re
from collections.abc import Callable, Sequence

import pandas as pd

from specviz.viz.style import ACCEPTED, BONUS, INK, LIGHT_GREY, MUTED_INK, PAPER, REJECT_INK, RESAMPLED, TARGET_STEP

WHITESPACE_MARKS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}

# kind -> (legend label, what it means, the cue that is not colour, inline style). Each kept fate has a fill from
# the palette (specviz.viz.style) and an outline or underline of its own; each thrown-away draft is struck through.
# The stream sits on its own PAPER with INK text in either theme, so every contrast is known (tests/test_palette.py).
_FILL = "background:{};color:" + INK + ";"
FATES: dict[str, tuple[str, str, str, str]] = {
    "accepted": ("accepted draft", "drafted and kept: u < min(1, p/q)", "solid underline", _FILL.format(ACCEPTED) + f"border-bottom:3px solid {INK};"),
    "resampled": ("resampled", "drawn from the residual max(0, p - q) after a rejection", "double underline", _FILL.format(RESAMPLED) + f"border-bottom:4px double {INK};"),
    "bonus": ("bonus", "free extra token from p_target after every draft was kept", "boxed", _FILL.format(BONUS) + f"border:2px solid {INK};"),
    "target": ("target step", "plain target sample: nothing was drafted this round", "dotted underline", _FILL.format(TARGET_STEP) + f"border-bottom:3px dotted {INK};"),
    "rejected": ("rejected draft", "the first draft the rule turned down (u >= min(1, p/q))", "thick strike-through, bold", f"color:{REJECT_INK};font-weight:600;text-decoration:line-through;text-decoration-thickness:2px;"),
    "discarded": ("discarded draft", "drafted after a rejection (or after the text ended inside the round): never checked, thrown away", "thin strike-through", f"color:{REJECT_INK};text-decoration:line-through;text-decoration-thickness:1px;"),
}  # fmt: skip
PROMPT_STYLE = f"color:{MUTED_INK};"
TOKEN_STYLE = "border-radius:3px;padding:1px 1px;margin:0 1px 0 0;white-space:pre-wrap;"
ROUND_START_STYLE = f"box-shadow:-2px 0 0 {MUTED_INK};margin-left:3px;"
MARK_STYLE = "font-size:.8em;"  # whitespace markers: smaller, never fainter (a faded marker fails contrast)
BOX_STYLE = (
    "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:0.92rem;line-height:2.0;word-break:break-word;"
    f"background:{PAPER};color:{INK};border:1px solid {LIGHT_GREY};border-radius:6px;padding:.2rem .5rem;"
)
TOKEN_CLASS = "specviz-tok"  # a generated token: focusable, its details in its accessible name (PAGE_CSS shows them on focus)
# The folded prompt: one line (the user's text, cut with an ellipsis), the whole prompt a click away.
SUMMARY_STYLE = "cursor:pointer;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;line-height:1.6;font-size:0.85rem;"


PIECE = re.compile(r"⟨([0-9A-F]{2}(?: [0-9A-F]{2})*)⟩")


def piece_text(raw: bytes) -> str:
    """A token's text from its bytes: the UTF-8 text, with each run of bytes that are not a whole character
    written as ``⟨E6 97⟩`` (upper-case hex). text_bytes inverts it."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out: list[str] = []
    pending: list[str] = []
    for ch in raw.decode("utf-8", errors="surrogateescape"):
        if "\udc80" <= ch <= "\udcff":  # a byte that is not part of a whole character
            pending.append(f"{ord(ch) - 0xDC00:02X}")
            continue
        if pending:
            out.append("⟨" + " ".join(pending) + "⟩")
            pending = []
        out.append(ch)
    if pending:
        out.append("⟨" + " ".join(pending) + "⟩")
    return "".join(out)


def text_bytes(text: str) -> bytes:
    """The bytes a token text stands for: the inverse of piece_text."""
    out = bytearray()
    end = 0
    for m in PIECE.finditer(text):
        out += text[end : m.start()].encode("utf-8")
        out += bytes.fromhex(m.group(1))
        end = m.end()
    out += text[end:].encode("utf-8")
    return bytes(out)


def has_piece(text: str) -> bool:
    return PIECE.search(text) is not None


def _open_tail(raw: bytes) -> bool:
    """True when raw ends in the first bytes of a character that later bytes could complete."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    decoder.decode(raw, final=False)
    return bool(decoder.getstate()[0])


def join_pieces(texts: Sequence[str]) -> list[tuple[int, int, str]]:
    """Group consecutive tokens whose bytes make whole characters together: (start, end, joined text) per
    group, end exclusive. A token stays alone unless it ends in an open character that the next one continues."""
    groups: list[tuple[int, int, str]] = []
    i = 0
    while i < len(texts):
        j = i + 1
        if has_piece(texts[i]):
            raw = text_bytes(texts[i])
            while j < len(texts) and _open_tail(raw) and 0x80 <= (text_bytes(texts[j])[:1] or b"\0")[0] <= 0xBF:
                raw += text_bytes(texts[j])
                j += 1
            groups.append((i, j, piece_text(raw) if j > i + 1 else texts[i]))
        else:
            groups.append((i, j, texts[i]))
        i = j
    return groups


class TokenTable:
    """token id -> text (piece_text of its bytes), looked up once and remembered. bytes_of: id -> raw bytes
    (specviz.models.token_bytes with a tokenizer, or a recording's table). The text is untrusted."""

    def __init__(self, bytes_of: Callable[[int], bytes]) -> None:
        self.bytes_of = bytes_of
        self.cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        token_id = int(token_id)
        text = self.cache.get(token_id)
        if text is None:
            text = self.cache[token_id] = piece_text(self.bytes_of(token_id))
        return text


def _segments(text: str) -> list[tuple[str, bool]]:
    """(part, is_piece) in order: the ⟨E6 97⟩ byte displays apart from the text around them."""
    out, end = [], 0
    for m in PIECE.finditer(text):
        if m.start() > end:
            out.append((text[end : m.start()], False))
        out.append((m.group(0), True))
        end = m.end()
    if end < len(text):
        out.append((text[end:], False))
    return out


def visible_plain(text: str) -> str:
    """Whitespace shown as markers (␣ ↵ ⇥), for chart labels; byte displays ⟨E6 97⟩ kept as they are. Not escaped."""
    return "".join(part if piece else "".join(WHITESPACE_MARKS.get(ch, ch) for ch in part) for part, piece in _segments(text))


def visible_html(text: str) -> str:
    """Escaped HTML with whitespace markers; a newline marker is followed by a real line break."""
    out = []
    for part, piece in _segments(text):
        if piece:
            out.append(html.escape(part))
            continue
        for ch in part:
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
        lines.append(f"u = {u}" + (" (not checked: an earlier draft was rejected, or the text ended before it)" if kind == "discarded" else ""))
    if kind == "resampled" and res is not None:
        lines.append(f"residual prob = {res}")
    return "\n".join(lines)


def token_span(text: str, style: str, title: str | None = None, mark_whitespace: bool = True, focusable: bool = False) -> str:
    """One token's <span>. focusable: reachable with Tab and by a tap, named for assistive technology by its title
    (its fate and numbers), so the details never need a hover."""
    title_attr = f' title="{html.escape(title, quote=True)}"' if title else ""
    if focusable and title:
        name = html.escape(title.replace("\n", "; "), quote=True)
        title_attr += f' class="{TOKEN_CLASS}" tabindex="0" aria-label="{name}"'
    body = visible_html(text) if mark_whitespace else html.escape(text)
    return f'<span style="{TOKEN_STYLE}{style}"{title_attr}>{body}</span>'


COMMITTED = ("accepted", "resampled", "bonus", "target")


def _joined_title(titles: Sequence[str]) -> str:
    return f"{len(titles)} tokens make this text together:\n\n" + "\n\n".join(titles)


def token_stream_html(prompt_texts: Sequence[str], stream: pd.DataFrame, *, show_prompt: bool = True, prompt_summary: str | None = None) -> str:
    """prompt_texts: the prompt's token strings; stream: specviz.viz.frames.stream_frame. Returns one <div>.
    Consecutive pieces of a character (in the prompt, or among committed tokens) are drawn as the character.
    prompt_summary: fold the prompt to one line showing this text (the user's prompt); a click unfolds every token."""
    parts = [f'<div class="specviz-stream" style="{BOX_STYLE}">']
    if show_prompt:
        if prompt_summary is not None:
            one_line = html.escape(" ".join(prompt_summary.split()))
            parts.append(
                f'<details class="specviz-prompt"><summary style="{SUMMARY_STYLE}{PROMPT_STYLE}">'
                f"prompt ({len(prompt_texts)} tokens with the chat template): {one_line}</summary>"
            )
        for start, end, text in join_pieces(list(prompt_texts)):
            title = "prompt" if end == start + 1 else _joined_title([f"prompt token {t!r}" for t in prompt_texts[start:end]])
            parts.append(token_span(text, PROMPT_STYLE, title))
        if prompt_summary is not None:
            parts.append("</details>")
    rows = stream.to_dict("records")
    i = 0
    while i < len(rows):
        j = i + 1
        if rows[i]["kind"] in COMMITTED:  # join only within a stretch of committed tokens
            while j < len(rows) and rows[j]["kind"] in COMMITTED:
                j += 1
        for start, end, text in join_pieces([r["text"] for r in rows[i:j]]):
            first = rows[i + start]
            style = FATES[first["kind"]][3] + (ROUND_START_STYLE if first["first_in_round"] else "")
            title = token_tooltip(first) if end == start + 1 else _joined_title([token_tooltip(r) for r in rows[i + start : i + end]])
            parts.append(token_span(text, style, title, focusable=True))
        i = j
    parts.append("</div>")
    return "".join(parts)


def legend_html(kinds: Sequence[str] = tuple(FATES)) -> str:
    """One swatch per fate, named with its cue beyond colour (underline, box, strike-through) and its meaning on
    hover and focus; plus the prompt and the round marker."""
    items = [token_span("prompt", PROMPT_STYLE, "the prompt (context, not generated)", False)]
    items += [token_span(FATES[k][0], FATES[k][3], f"{FATES[k][0]} ({FATES[k][2]}): {FATES[k][1]}", False) for k in kinds]
    items.append(token_span("new round", ROUND_START_STYLE, "a thin bar marks where each round's tokens start", False))
    items.append(token_span("␣ space ↵ newline", MARK_STYLE, "whitespace is drawn so token boundaries show", False))
    return f'<div class="specviz-legend" style="{BOX_STYLE}font-size:0.85rem;">' + " ".join(items) + "</div>"
