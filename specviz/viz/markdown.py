"""Untrusted text (URL parameters, a file's fields, token texts, labels, exception messages) put into Markdown so
that it shows literally: no link, image, emphasis, code span, heading, HTML tag, autolink, nor Streamlit's colour
directive, icon or emoji shortcode.

Streamlit draws st.markdown, st.error/warning/info/success, captions, toasts, radio options and status labels as
GitHub-flavoured Markdown. md_text backslash-escapes every mark that starts inline syntax, and block syntax at a
line's start (CommonMark renders an escaped mark as the mark itself), and puts a word joiner (U+2060, invisible)
where GFM would turn a bare ``http://``, ``www.`` or ``name@host`` into a link, and after a colon that could start
Streamlit's ``:red[x]``, ``:material/home:`` or ``:smile:`` ("ratio: 2" is left alone): both are found in the text
after escapes are resolved, so escapes alone do not stop them. md_code wraps text in a code span whose fence is
longer than any run of backticks inside, so a backtick in a token cannot end the span. Pure string work: no
streamlit here."""

from __future__ import annotations

import re

WORD_JOINER = "\u2060"
# inline syntax anywhere: escapes, code, emphasis, links/images (brackets), HTML and entities, strikethrough, math, tables
_INLINE = re.compile(r"([\\`*\[\]<>&~$|])")
# an underscore opens or closes emphasis only beside a non-alphanumeric: snake_case names stay as written
_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# block syntax at the start of a line: headings, lists, quotes, setext underlines, ordered lists ("1." / "1)")
_LINE_START = re.compile(r"(?m)^([ \t]*)([#+\-=]|\d+(?=[.)]))")
# broken by a word joiner: where GFM's literal autolinks start ('http://', 'https://', 'www.', 'name@host') and
# Streamlit's colon syntax (directives ':red[x]', ':small[x]', icons ':material/home:', emoji ':smile:', ':+1:')
_JOINED = re.compile(r"(?i):(?=[/\w+\-])|www(?=\.)|@")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")


def md_text(text: object) -> str:
    """Any value as Markdown that renders as its text, literally (the word joiners are invisible). Commas, periods
    and parentheses stay as they are, so a message reads (and tests match) as written."""
    out = _INLINE.sub(r"\\\1", _JOINED.sub(lambda m: m.group(0) + WORD_JOINER, str(text)))
    out = _UNDERSCORE.sub(r"\\_", out)
    return _LINE_START.sub(_escape_line_start, out)


def _escape_line_start(m: re.Match) -> str:
    indent, mark = m.group(1), m.group(2)
    return f"{indent}{mark}\\" if mark[0].isdigit() else f"{indent}\\{mark}"  # "1\." / "\#"


def md_code(text: object) -> str:
    """Text as one inline code span, whatever backticks it holds (line breaks become spaces: a span is one line)."""
    body = _LINE_BREAKS.sub(" ", str(text))
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    if body.startswith(("`", " ")) or body.endswith(("`", " ")):
        body = f" {body} "  # CommonMark strips one space each side, so a leading/trailing backtick stays inside
    return f"{fence}{body or WORD_JOINER}{fence}"
