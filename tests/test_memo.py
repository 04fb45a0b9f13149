"""Frames and figures once per round (specviz.ui.common.memo): kept on the session, rebuilt when a round is added."""

from __future__ import annotations

from types import SimpleNamespace

from specviz.ui.common.memo import memo, round_key


def _session(rounds: list[int], baseline_records: int = 0):
    records = lambda n: [SimpleNamespace(finished=False, emitted=(1,)) for _ in range(n)]  # noqa: E731
    return SimpleNamespace(
        memo={}, runs=[SimpleNamespace(records=records(n)) for n in rounds], baseline=SimpleNamespace(records=records(baseline_records), error=None)
    )


def test_built_once_per_round_and_per_session():
    session, builds = _session([2]), []
    build = lambda: builds.append(1) or len(builds)  # noqa: E731
    assert memo(session, "curves", round_key(session), build) == 1
    assert memo(session, "curves", round_key(session), build) == 1  # a rerun without a new round reuses it
    session.runs[0].records.append(SimpleNamespace(finished=False, emitted=(1,)))
    assert memo(session, "curves", round_key(session), build) == 2  # a Step builds again
    session.baseline.records.append(SimpleNamespace(finished=False, emitted=(1,)))
    assert memo(session, "curves", round_key(session), build) == 3  # so does the baseline's progress
    other = _session([3])
    assert memo(other, "curves", round_key(other), build) == 4  # another session: its own store
    assert len(session.memo) == 1  # one value per name, the previous one replaced


def test_an_object_without_a_store_builds_every_time():
    builds = []
    for _ in range(2):
        memo(object(), "x", (), lambda: builds.append(1))
    assert len(builds) == 2
