"""Recordings: one versioned JSON file that holds a run (or two, side by side) and its plain-decoding baseline,
everything the views draw and nothing that needs a model.

Build one from finished or unfinished runs (build_recording), write it (dumps / save_recording), read it back
(load_recording / read_recording). Reading first checks the parsed JSON field by field against the schema
(check_fields: every text within its length, every number finite and in its range, cheap and before anything
else), then validates the whole file with pydantic (types, fates, lengths, ids inside the declared vocabulary, a
text for every id shown), and raises RecordingError, a ValueError whose message says what is wrong where.
Records are stored field by field from their dataclasses, so fields added to StepRecord later are saved,
capped and validated without changes here. Imports neither streamlit nor transformers.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field, field_validator, model_validator

from specviz.config import MAX_PROMPT_CHARS, RunConfig
from specviz.core.decoding import MAX_DRAFT_TOKENS
from specviz.core.metrics import RunMetrics, run_metrics
from specviz.core.records import StepRecord
from specviz.core.tree import MAX_TREE_WIDTH

FORMAT = "specviz-recording"
VERSION = 1
MAX_BYTES = 50 * 1024 * 1024  # the largest file read (the app's upload limit too)
MAX_ERRORS_SHOWN = 3
MAX_TOKEN_TEXT_CHARS = 1_000  # a token's text is a few characters; a longer one is not a token (a 40 MB one hung the tab)
MAX_TOKEN_TEXTS = 200_000  # distinct texts: more than any recording shows (a view draws at most a few per drafted position)
MAX_INT_DIGITS = 30  # ids, counts, seeds and lengths fit in 20 digits; longer numbers are refused before Python converts them
MAX_NAME_CHARS = 1_000  # any text without a limit of its own: a model, device, version, path, date or fate
MAX_TITLE_CHARS = 500  # a one-line description (the menu and banner show it whole)
MAX_LABEL_CHARS = 80  # a run's label, drawn in legends and column headers
MAX_ERROR_CHARS = 4_000  # why a run stopped: a message, not a log (recorded_run cuts a longer one)
MAX_KEY_CHARS = 100  # a key of a JSON object: a field name, or a token id in token_texts


class RecordingError(ValueError):
    """A file that is not a recording this specviz can replay; the message says why."""


Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]


class Environment(BaseModel):
    """Where the recording was made."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: Name  # the target's name
    vocab_size: int = Field(ge=1)  # ids in the file must lie in [0, vocab_size)
    dtype: Name
    device: Name  # cpu, cuda:0, mps
    device_name: Name  # e.g. NVIDIA H200, or the CPU's name
    torch: Name
    transformers: Name | None = None
    specviz: Name = ""
    python: Name = ""
    created: Name  # ISO 8601 date and time, UTC


class RecordedRun(BaseModel):
    """One decode: its settings, every round's record, and the statistics derived from them.

    The file's `stats` are written from the records (RunMetrics.to_json, as the CLI prints them) for tools that read
    the JSON; reading, specviz ignores them and derives the metrics from the records again (`metrics`), so a file's
    numbers never disagree with its rounds and files written before stats changed shape still load."""

    model_config = ConfigDict(frozen=True)

    # as the page names it: "n-gram model", "A: prompt lookup", "baseline (plain decoding)". See check_label.
    label: str = Field(min_length=1, max_length=MAX_LABEL_CHARS)
    config: RunConfig
    seed: int  # the seed this run drew with (samples of the CLI derive theirs from config.seed)
    prefill_ms: float = 0.0
    records: tuple[StepRecord, ...]
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS)] | None = None  # a run stopped by an error keeps the rounds before it

    @property
    def finished(self) -> bool:
        return bool(self.records) and self.records[-1].finished

    @property
    def metrics(self) -> RunMetrics:
        """The run's metrics and timing, from its records (specviz.core.metrics.run_metrics; no speedup: see
        Recording.metrics_of for one against the recording's baseline)."""
        return run_metrics(self.records, prefill_ms=self.prefill_ms)

    @computed_field  # written to the file, never read back
    @property
    def stats(self) -> dict:
        return self.metrics.to_json()

    @field_validator("label")
    @classmethod
    def _label(cls, label: str) -> str:
        return check_label(label)

    @model_validator(mode="after")
    def _consistent(self) -> RecordedRun:
        for i, r in enumerate(self.records):
            where = f"round {i}"
            if r.index != i:
                raise ValueError(f"{where}: its index is {r.index}; rounds must be numbered 0, 1, 2, ...")
            check_record(r, where)
        return self


# A label is drawn in Markdown, chart legends and CSV exports: no link or HTML syntax, no URL, no spreadsheet formula.
_LABEL_MARKUP = re.compile(r"[<>\[\]`\\]")
_LABEL_URL = re.compile(r"(?i)\bwww\.|[a-z][a-z0-9+.\-]*:(?=\S)")  # www., or a scheme (http:, javascript:, data:) before text
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def check_label(label: str) -> str:
    """The label, or ValueError saying what a run label may not hold."""
    if _LABEL_MARKUP.search(label):
        raise ValueError("a run label may not contain brackets, angle brackets, backticks or backslashes")
    if _LABEL_URL.search(label):
        raise ValueError("a run label may not contain a web address or a scheme such as http:, www. or javascript:")
    if label.startswith(_FORMULA_START) or label.lstrip().startswith(_FORMULA_START):
        raise ValueError("a run label may not start with =, +, -, @, a tab or a carriage return (a spreadsheet would read it as a formula)")
    return label


def check_record(r: StepRecord, where: str) -> None:
    """Raise ValueError if a record contradicts itself (lengths, fates, emitted drafts)."""
    n = len(r.drafted)
    for name in ("p_target", "q_draft", "accept_prob", "uniforms", "draft_fates"):
        if len(getattr(r, name)) != n:
            raise ValueError(f"{where}: {n} drafted tokens but {len(getattr(r, name))} {name}")
    for j, dist in enumerate(r.dists):
        for name in ("p_target", "q_draft", "residual"):
            values = getattr(dist, name)
            if values is not None and len(values) != len(dist.token_ids):
                raise ValueError(f"{where}, position {j}: {len(dist.token_ids)} token ids but {len(values)} {name} values")
    if r.tree_parents or r.accepted_path:  # a token-tree round has its own consistency rules
        check_tree_record(r, where)
        return
    fates = "".join({"accepted": "a", "rejected": "r", "discarded": "d"}[f] for f in r.draft_fates)
    if not re.fullmatch("a*r?d*", fates):
        raise ValueError(f"{where}: draft fates {list(r.draft_fates)} do not match the rule (accepted ones, then at most one rejected, then discarded ones)")
    for name in ("emitted_fates", "emitted_margin"):
        values = getattr(r, name, None)
        if values is not None and len(values) != len(r.emitted):
            raise ValueError(f"{where}: {len(r.emitted)} emitted tokens but {len(values)} {name}")
    kept = [t for t, f in zip(r.emitted, r.emitted_fates) if f == "accepted"]
    if kept != list(r.drafted[: len(kept)]) or len(kept) > r.num_accepted:
        raise ValueError(f"{where}: the emitted accepted tokens {kept} are not the accepted drafted tokens {list(r.drafted[: r.num_accepted])}")
    if any(f == "accepted" for f in r.emitted_fates[len(kept) :]):
        raise ValueError(f"{where}: accepted tokens must come first among the emitted ones")


def check_tree_record(r: StepRecord, where: str) -> None:
    """Raise ValueError if a token-tree round contradicts itself: parents, the accepted path, fates, emitted."""
    n = len(r.drafted)
    for name in ("tree_parents", "tree_p_current"):
        if len(getattr(r, name)) != n:
            raise ValueError(f"{where}: {n} tree nodes but {len(getattr(r, name))} {name}")
    if any(not (-1 <= j < i) for i, j in enumerate(r.tree_parents)):
        raise ValueError(f"{where}: tree parents must be -1 or an earlier node's index; got {list(r.tree_parents)}")
    path, parent = list(r.accepted_path), -1
    for node in path:
        if not (0 <= node < n) or r.tree_parents[node] != parent or r.draft_fates[node] != "accepted":
            raise ValueError(f"{where}: the accepted path {path} is not a chain of accepted nodes from the root")
        parent = node
    if sum(f == "accepted" for f in r.draft_fates) != len(path):
        raise ValueError(f"{where}: {sum(f == 'accepted' for f in r.draft_fates)} accepted nodes but an accepted path of {len(path)}")
    if len(r.emitted_fates) != len(r.emitted) or list(r.emitted[: len(path)]) != [r.drafted[i] for i in path]:
        raise ValueError(f"{where}: the emitted tokens do not start with the accepted path's tokens")
    if any(f == "accepted" for f in r.emitted_fates[len(path) :]) or any(f != "accepted" for f in r.emitted_fates[: len(path)]):
        raise ValueError(f"{where}: accepted tokens must come first among the emitted ones")


def record_ids(r: StepRecord) -> Iterable[int]:
    """Every token id a record shows: drafted, emitted, and the top-N rows of each position."""
    yield from r.drafted
    yield from r.emitted
    for dist in r.dists:
        yield from dist.token_ids


class Recording(BaseModel):
    """The whole file. See the README's 'Recordings' section for the schema in words."""

    model_config = ConfigDict(frozen=True)

    format: Literal["specviz-recording"]
    version: Literal[1]
    title: str = Field("", max_length=MAX_TITLE_CHARS)  # a one-line description, e.g. for the examples menu
    environment: Environment
    prompt: str = Field(max_length=MAX_PROMPT_CHARS)  # the prompt as typed (before any chat template)
    prompt_ids: tuple[int, ...]  # the ids the target saw, chat template included
    # every id shown -> its text; a piece of a character as its bytes, ⟨E6 97⟩ (capped in length and number)
    token_texts: dict[int, Annotated[str, Field(max_length=MAX_TOKEN_TEXT_CHARS)]] = Field(max_length=MAX_TOKEN_TEXTS)
    runs: tuple[RecordedRun, ...] = Field(min_length=1, max_length=8)  # one, or two side by side
    baseline: RecordedRun | None = None  # plain decoding of the same target, prompt and sampling

    @model_validator(mode="after")
    def _ids_known(self) -> Recording:
        vocab = self.environment.vocab_size
        sources = [("prompt_ids", self.prompt_ids)]
        for name, run in self.named_runs():
            sources += [(f"{name}, round {r.index}", tuple(record_ids(r))) for r in run.records]
        for where, ids in sources:
            bad = [i for i in ids if not 0 <= i < vocab]
            if bad:
                raise ValueError(f"{where}: token id {bad[0]} is outside the vocabulary of {vocab} the file declares")
            missing = [i for i in ids if i not in self.token_texts]
            if missing:
                raise ValueError(f"{where}: token id {missing[0]} has no entry in token_texts")
        return self

    def named_runs(self) -> list[tuple[str, RecordedRun]]:
        out = [(f"run {i} ({run.label})", run) for i, run in enumerate(self.runs)]
        return out + ([("baseline", self.baseline)] if self.baseline is not None else [])

    def token_text(self, token_id: int) -> str:
        return self.token_texts[int(token_id)]

    def metrics_of(self, run: RecordedRun) -> RunMetrics:
        """A run's metrics with the measured speedup against the recording's baseline (none for the baseline itself)."""
        baseline = self.baseline.records if self.baseline is not None and run is not self.baseline else ()
        return run_metrics(run.records, baseline, run.prefill_ms)

    def describe(self) -> str:
        """'SmolLM2-135M-Instruct (float32) on cpu (AMD EPYC), torch 2.13, transformers 5.23, 2026-11-29 18:55 UTC'."""
        env = self.environment
        versions = f"torch {env.torch}" + (f", transformers {env.transformers}" if env.transformers else "")
        return f"{env.model} ({env.dtype}) on {env.device} ({env.device_name}), {versions}, {env.created.replace('T', ' ')[:16]} UTC"


def recorded_run(label: str, config: RunConfig, records: Sequence[StepRecord], *, seed: int | None = None, prefill_ms: float = 0.0, error: str | None = None) -> RecordedRun:
    """A run's part of a recording; the statistics are derived from the records."""
    records = tuple(records)
    if error is not None and len(error) > MAX_ERROR_CHARS:
        error = error[: MAX_ERROR_CHARS - 1] + "…"
    return RecordedRun(
        label=label, config=config, seed=config.seed if seed is None else seed, prefill_ms=prefill_ms,
        records=records, error=error,
    )  # fmt: skip


def now_utc() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "")


def build_recording(
    *,
    prompt: str,
    prompt_ids: Sequence[int],
    runs: Sequence[RecordedRun],
    baseline: RecordedRun | None,
    token_text: Callable[[int], str],
    environment: dict,
    title: str = "",
) -> Recording:
    """Assemble and validate a recording. token_text: id -> text (specviz.viz.tokens.TokenTable over the
    tokenizer), asked once for every id the views can show."""
    ids = set(prompt_ids)
    for run in [*runs, *([baseline] if baseline else [])]:
        for r in run.records:
            ids.update(record_ids(r))
    return Recording(
        format=FORMAT, version=VERSION, title=title, environment=Environment(**{"created": now_utc(), **environment}),
        prompt=prompt, prompt_ids=tuple(prompt_ids), token_texts={i: token_text(i) for i in sorted(ids)},
        runs=tuple(runs), baseline=baseline,
    )  # fmt: skip


def dumps(recording: Recording) -> str:
    """The recording as JSON text (UTF-8, compact)."""
    return json.dumps(recording.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))


def save_recording(recording: Recording, path: str | os.PathLike) -> None:
    Path(path).write_text(dumps(recording), encoding="utf-8")


# --- field by field: every text within its length, every number finite and in range ---------------------------

INT64_MAX = 2**63 - 1
MAX_MS = 1e9  # about 11.6 days: longer than any round or run
MIN_PASS_MS = 1e-6  # a nanosecond: a target pass takes longer (the speedup and the verify cost divide by it)
MAX_NUMBER = 1e15  # any other number; sums over a whole file stay finite


@dataclass(frozen=True)
class Limit:
    """A number field's range [low, high] and what the field is, for the message."""

    low: float
    high: float
    what: str


PROBABILITY = Limit(0.0, 1.0, "a probability")
DURATION = Limit(0.0, MAX_MS, "a time in ms")
PASS_TIME = Limit(MIN_PASS_MS, MAX_MS, "a target pass's time in ms (speedups divide by it)")
WHOLE = Limit(0, INT64_MAX, "a count, an id or a seed")
NUMBER = Limit(0.0, MAX_NUMBER, "a number")
ANY_NUMBER = Limit(-MAX_NUMBER, MAX_NUMBER, "a number")  # in fields the schema leaves open (the environment's extras)

# By schema model and field; every other integer is WHOLE and every other number NUMBER, within any minimum or
# maximum the schema states. RunConfig's own validate() then checks its fields' finer rules.
NUMBER_LIMITS: dict[str, Limit] = {
    **{f"StepRecord.{name}": PROBABILITY for name in (
        "p_target", "q_draft", "accept_prob", "uniforms", "next_p_target", "next_residual", "overlap", "tree_p_current")},
    **{f"TokenDist.{name}": PROBABILITY for name in ("p_target", "q_draft", "residual")},
    **{f"StepRecord.{name}": DURATION for name in ("draft_ms", "record_ms")},
    **{f"StepRecord.{name}": PASS_TIME for name in ("verify_ms", "round_ms")},
    "StepRecord.num_draft_tokens": Limit(0, MAX_DRAFT_TOKENS, "k, the tokens asked of the drafter"),
    "StepRecord.tree_width": Limit(1, MAX_TREE_WIDTH, "a tree width"),
    "StepRecord.tree_parents": Limit(-1, INT64_MAX, "a parent node's index (-1: the root)"),
    "RecordedRun.prefill_ms": DURATION,
    "RunConfig.ngram_threshold": PROBABILITY,
    "RunConfig.top_p": PROBABILITY,
}  # fmt: skip


@dataclass
class FieldRule:
    """What may stand at one place of the file: a text of at most `text` characters, a number within `number`, an
    object's `fields` (and `values` under any other key), an array's `items`. None: not checked here."""

    text: int | None = None
    number: Limit | None = None
    fields: dict[str, FieldRule] = field(default_factory=dict)
    values: FieldRule | None = None
    items: FieldRule | None = None

    def merge(self, other: FieldRule) -> None:
        """Allow what other allows too (a union: `str | None`, `RecordedRun | None`)."""
        self.text = max(self.text or 0, other.text or 0) or None
        self.number = self.number or other.number
        self.fields.update(other.fields)
        self.values, self.items = self.values or other.values, self.items or other.items


def _open_rule() -> FieldRule:
    """For a place the schema leaves open (any JSON): every text, number and key below it capped."""
    rule = FieldRule(text=MAX_NAME_CHARS, number=ANY_NUMBER)
    rule.values = rule.items = rule
    return rule


def _rule(schema: dict, defs: dict, key: str, seen: dict[str, FieldRule]) -> FieldRule:
    """The rule for one place of the JSON schema; key is "Model.field", for NUMBER_LIMITS."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name not in seen:  # one rule per model, made once (and a model that holds itself would not loop)
            seen[name] = FieldRule()
            _fill(seen[name], defs[name], defs, name, seen)
        return seen[name]
    rule = FieldRule()
    _fill(rule, schema, defs, key, seen)
    return rule


def _fill(rule: FieldRule, schema: dict, defs: dict, key: str, seen: dict[str, FieldRule]) -> None:
    for branch in schema.get("anyOf", ()):
        rule.merge(_rule(branch, defs, key, seen))
    kind = schema.get("type")
    if kind == "string":
        rule.text = schema.get("maxLength", MAX_NAME_CHARS)
    elif kind in ("integer", "number"):
        base = NUMBER_LIMITS.get(key, WHOLE if kind == "integer" else NUMBER)
        low, high = max(base.low, schema.get("minimum", base.low)), min(base.high, schema.get("maximum", base.high))
        rule.number = Limit(low, high, base.what)
    elif kind == "array" and "items" in schema:
        rule.items = _rule(schema["items"], defs, key, seen)
    model = schema.get("title", key) if "properties" in schema else key
    for name, sub in schema.get("properties", {}).items():
        rule.fields[name] = _rule(sub, defs, f"{model}.{name}", seen)
    extra = schema.get("additionalProperties")
    if extra is True:
        rule.values = _open_rule()
    elif isinstance(extra, dict):
        rule.values = _rule(extra, defs, key, seen)


@cache
def field_rules() -> FieldRule:
    """The rule for the whole file, compiled once from Recording's JSON schema, so a field added later is checked too."""
    schema = json_schema()
    return _rule(schema, schema.get("$defs", {}), "Recording", {})


def _where(path: tuple[str, ...]) -> str:
    return "".join(path).lstrip(".") or "the file"


def _bound(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _check(value: object, rule: FieldRule, path: tuple[str, ...]) -> None:
    """Raise RecordingError at the first text too long, number out of range, or key too long, naming its place."""
    if isinstance(value, str):
        if rule.text is not None and len(value) > rule.text:
            raise RecordingError(f"{_where(path)} is {len(value):,} characters long; it may be at most {rule.text:,}.")
        if rule.text is None and rule.number is not None:
            raise RecordingError(f"{_where(path)} must be a number, not a text.")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        limit = rule.number
        if limit is not None and not (limit.low <= value <= limit.high):
            raise RecordingError(f"{_where(path)} is {value!r}: {limit.what} must lie between {_bound(limit.low)} and {_bound(limit.high)}.")
    elif isinstance(value, dict):
        for key, item in value.items():
            if len(key) > MAX_KEY_CHARS:
                raise RecordingError(f"{_where(path)} has a key of {len(key):,} characters; keys may be at most {MAX_KEY_CHARS}.")
            if key in rule.fields:
                _check(item, rule.fields[key], (*path, f".{key}"))
            elif rule.values is not None:
                _check(item, rule.values, (*path, f"[{key!r}]"))
    elif isinstance(value, list) and rule.items is not None:
        _check_items(value, rule.items, path)


def _check_items(items: list, rule: FieldRule, path: tuple[str, ...]) -> None:
    """An array's items; numbers in a numbers-only array are compared in line (an array of 10^6 floats is common)."""
    limit = rule.number
    plain = limit is not None and rule.text is None and not (rule.fields or rule.values or rule.items)
    for i, item in enumerate(items):
        if plain and type(item) in (int, float) and limit.low <= item <= limit.high:
            continue
        _check(item, rule, (*path, f".{i}"))


def check_fields(raw: object) -> None:
    """Every text, number and key of a parsed file against its place in the schema (field_rules); RecordingError
    names the first that is off. One pass over the parsed JSON, before pydantic sees it."""
    try:
        _check(raw, field_rules(), ())
    except RecursionError:  # json.loads reads nesting a little deeper than this walk can follow
        raise RecordingError("This is not a specviz recording: its JSON is nested too deeply to read.") from None


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


def json_schema() -> dict:
    """The JSON Schema of the file (for the README and for tools in other languages)."""
    return Recording.model_json_schema()
