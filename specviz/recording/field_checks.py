"""Field by field: a parsed file checked against rules compiled from the format's JSON schema (check_fields), every
text within its length, every number finite and in its range, every key short, cheap and before pydantic sees the
file. The rules follow the schema, so a field added later is checked too."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.recording.schema import MAX_NAME_CHARS, RecordingError, json_schema

MAX_KEY_CHARS = 100  # a key of a JSON object: a field name, or a token id in token_texts
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
    "KChoice.acceptance": PROBABILITY,
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
