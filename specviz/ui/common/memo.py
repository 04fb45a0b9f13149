"""Frames and figures built once per round: memoised on the session object itself (per browser session, freed with
it; never a module global), keyed on what they are drawn from (the runs' round counts and the baseline's progress).

A rerun that changes no round (an inspector click, a sidebar change, Play's idle ticks) reuses them; a Step builds
them again. The records are append-only, so their counts identify what was drawn."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def memo(session: object, name: str, key: tuple, build: Callable[[], T]) -> T:
    """build() once per (name, key) for this session; the previous value for a name is replaced, not kept."""
    store = getattr(session, "memo", None)
    if not isinstance(store, dict):
        return build()
    hit = store.get(name)
    if hit is not None and hit[0] == key:
        return hit[1]
    value = build()
    store[name] = (key, value)
    return value


def baseline_state(baseline) -> tuple:
    """What a baseline contributes to a drawing: how far it has measured, whether it stopped, why not."""
    records = baseline.records
    return (len(records), bool(records) and bool(records[-1].finished), baseline.error)


def round_key(session) -> tuple:
    """The rounds of every run and the baseline's progress: what the curves and tables are drawn from."""
    return (tuple(len(r.records) for r in session.runs), baseline_state(session.baseline))
