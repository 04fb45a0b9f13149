"""The recording's format: one versioned JSON file that holds a run (or two, side by side) and its plain-decoding
baseline, everything the views draw and nothing that needs a model (docs/recording-format.md).

The pydantic models (Recording, RecordedRun, Environment) are the schema; their validators hold the rules a file must
keep beyond types (check_label, check_record, check_tree_record: lengths, fates, ids inside the declared vocabulary, a
text for every id shown). Records are stored field by field from their dataclasses, so fields added to StepRecord later
are saved, capped and validated without changes here. Imports neither streamlit nor transformers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator, model_validator

from specviz.config import MAX_PROMPT_CHARS, RunConfig
from specviz.core.metrics import RunMetrics, run_metrics
from specviz.core.records import StepRecord

FORMAT = "specviz-recording"
VERSION = 1
MAX_TOKEN_TEXT_CHARS = 1_000  # a token's text is a few characters; a longer one is not a token (a 40 MB one hung the tab)
MAX_TOKEN_TEXTS = 200_000  # distinct texts: more than any recording shows (a view draws at most a few per drafted position)
MAX_NAME_CHARS = 1_000  # any text without a limit of its own: a model, device, version, path, date or fate
MAX_TITLE_CHARS = 500  # a one-line description (the menu and banner show it whole)
MAX_LABEL_CHARS = 80  # a run's label, drawn in legends and column headers
MAX_ERROR_CHARS = 4_000  # why a run stopped: a message, not a log (recorded_run cuts a longer one)


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

    @model_validator(mode="before")
    @classmethod
    def _before_auto_k(cls, data: object) -> object:
        """A run recorded before k: auto existed drafted a fixed (or adaptive) k: its config says so."""
        if isinstance(data, dict) and isinstance(data.get("config"), dict) and "auto_k" not in data["config"]:
            return {**data, "config": {**data["config"], "auto_k": False}}
        return data

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


def json_schema() -> dict:
    """The JSON Schema of the file (for the README and for tools in other languages)."""
    return Recording.model_json_schema()
