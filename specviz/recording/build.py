"""Writing a recording: a run's part from its records (recorded_run), the whole file from finished or unfinished runs
(build_recording, validated as it is built), and its JSON text (dumps, save_recording)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from specviz.config import RunConfig
from specviz.core.records import StepRecord
from specviz.recording.schema import FORMAT, MAX_ERROR_CHARS, VERSION, Environment, RecordedRun, Recording, record_ids


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
