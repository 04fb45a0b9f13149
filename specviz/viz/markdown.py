"""Untrusted text (URL parameters, a file's fields, token texts, labels, exception messages) put into Markdown so
that it shows literally: no link, image, emphasis, code span, heading, HTML tag, colour directive or autolink.

Streamlit draws st.markdown, st.error/warning/info/success, captions, toasts, radio options and status labels as
GitHub-flavoured Markdown. md_text escapes every ASCII punctuation mark with a backslash (CommonMark renders an
escaped mark as the mark itself) and puts a word joiner (U+2060, invisible) where GFM would turn a bare
``http://``, ``www.`` or ``name@host`` into a link: its autolinker runs on the text after escapes are resolved,
so escapes alone do not stop it. md_code wraps text in a code span whose fence is longer than any run of backticks
inside, so a backtick in a token cannot end the span. Pure string work: no streamlit here."""

from __future__ import annotations

import re

WORD_JOINER = "\u2060"
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation mark (CommonMark's escapable set)
# where GFM's literal autolinks start: a scheme's ':' before '//' (and any scheme-like 'name:'), 'www.', an '@'
_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9+.\-]):|www(?=\.)|@")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")


def _break_autolinks(text: str) -> str:
    return _AUTOLINK.sub(lambda m: m.group(0) + WORD_JOINER, text)


def md_text(text: object) -> str:
    """Any value as Markdown that renders as its text, literally (the word joiners are invisible)."""
    return _PUNCTUATION.sub(r"\\\1", _break_autolinks(str(text)))


def md_code(text: object) -> str:
    """Text as one inline code span, whatever backticks it holds (line breaks become spaces: a span is one line)."""
    body = _LINE_BREAKS.sub(" ", str(text))
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    if body.startswith(("`", " ")) or body.endswith(("`", " ")):
        body = f" {body} "  # CommonMark strips one space each side, so a leading/trailing backtick stays inside
    return f"{fence}{body or WORD_JOINER}{fence}"
