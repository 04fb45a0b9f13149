"""Reading a recording, an untrusted file: its size, its JSON (numbers too long to be ids refused as they are parsed),
its format and version, the token texts' count, every field (field_checks.check_fields), then the whole file with
pydantic (schema.Recording). Anything wrong raises RecordingError, a ValueError whose message says what is wrong where."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from specviz.recording.field_checks import check_fields
from specviz.recording.schema import FORMAT, MAX_TOKEN_TEXTS, VERSION, Recording, RecordingError

MAX_BYTES = 50 * 1024 * 1024  # the largest file read (the app's upload limit too)
MAX_ERRORS_SHOWN = 3
MAX_INT_DIGITS = 30  # ids, counts, seeds and lengths fit in 20 digits; longer numbers are refused before Python converts them


def _describe(exc: ValidationError) -> str:
    """The first few errors, each at its place. An error at a place that holds another error's place is left out: a
    run that failed leaves `runs` one item short ("at least 1 item"), which says nothing the run's own error does not."""
    errors = exc.errors()
    locs = [tuple(err["loc"]) for err in errors]
    errors = [err for err, loc in zip(errors, locs) if not any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs)]
    lines = []
    for err in errors[:MAX_ERRORS_SHOWN]:
        where = ".".join(str(p) for p in err["loc"]) or "the file"
        msg = err["msg"].removeprefix("Value error, ").rstrip(".")
        lines.append(f"{where}: {msg}")
    more = len(errors) - len(lines)
    return "; ".join(lines) + (f" (and {more} more)" if more > 0 else "")


def _parse_int(text: str) -> int:
    """json's integer hook: our message for a number too long to be an id, before Python's own limit (4,300 digits)."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise RecordingError(f"This recording is damaged: it holds a whole number of {len(text.lstrip('-')):,} digits; numbers in a recording have at most {MAX_INT_DIGITS}.")
    return int(text)


def check_token_texts(raw: dict) -> None:
    """Refuse too many token texts before walking them (their lengths are checked with every other text's)."""
    texts = raw.get("token_texts")
    if isinstance(texts, dict) and len(texts) > MAX_TOKEN_TEXTS:
        raise RecordingError(f"This recording has {len(texts):,} token texts; a recording may hold at most {MAX_TOKEN_TEXTS:,}.")


def _shown(value: object, limit: int = 80) -> str:
    """A value from the file in a message: its repr, cut (a 40 MB format string is not repeated back)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def load_recording(data: bytes | str) -> Recording:
    """Parse and validate a recording. Raises RecordingError saying what is wrong."""
    size = len(data.encode("utf-8") if isinstance(data, str) else data)
    if size > MAX_BYTES:
        raise RecordingError(f"The file is {size / 2**20:.1f} MB; recordings are limited to {MAX_BYTES // 2**20} MB.")
    try:
        raw = json.loads(data, parse_int=_parse_int)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordingError(f"This is not a specviz recording: it is not JSON text ({exc}).") from None
    except RecursionError:
        raise RecordingError("This is not a specviz recording: its JSON is nested too deeply to read.") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise RecordingError(f"This is not a specviz recording: its format is {_shown(found)}, not {FORMAT!r}.")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordingError(f"This recording has no valid version number ({_shown(version)}); this specviz reads version {VERSION}.")
    if version > VERSION:
        raise RecordingError(f"This recording is version {version}, newer than this specviz reads ({VERSION}): update specviz to open it.")
    check_token_texts(raw)
    check_fields(raw)
    try:
        return Recording.model_validate(raw)
    except ValidationError as exc:
        raise RecordingError(f"This recording is damaged or inconsistent: {_describe(exc)}.") from None


def read_recording(path: str | os.PathLike) -> Recording:
    """load_recording on a file, checking its size before reading it."""
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise RecordingError(f"{path} is {size / 2**20:.1f} MB; recordings are limited to {MAX_BYTES // 2**20} MB.")
    return load_recording(Path(path).read_bytes())
