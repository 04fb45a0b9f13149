"""The room's presentation store and the presenter key (plain Python, no app): atomic writes, takeover, hostile
files that read as nothing, a capped board validated line by line, and a key compared in constant time, refused
when wrong or empty, rate-limited, and off when the owner set none."""

from __future__ import annotations

import errno
import json
import os

import pytest

from specviz.viz.board import board_figure, board_frame, board_table, temperature_band
from specviz.workshop import presentation as pres
from specviz.workshop.policy import load_policy
from specviz.workshop.presentation import BoardPoint, KeyGate, Presentation, PresentationStore, check_key, new_id, presenter_key
from specviz.workshop.saved_runs import RunStore, new_token, write_problem


def point(fork: str | None = None, **changes) -> BoardPoint:
    base = dict(fork=fork or new_id(), drafter="ngram", k=4, temperature=1.0, rounds=5, alpha=0.5, tokens_per_pass=1.8, speedup=1.3, at=1.0)
    return BoardPoint(**(base | changes))


def test_start_update_stop_and_the_file_is_atomic_and_private(tmp_path):
    room = PresentationStore(tmp_path)
    assert room.read() is None
    run = new_token()
    p, before = room.start(run, 2)
    assert before is None and room.read() == p and p.run == run and p.round == 2 and p.version == 1
    assert os.stat(room.path).st_mode & 0o077 == 0
    moved = room.update(p.id, round=3)
    assert moved.version == 2 and room.read().round == 3
    assert room.update(p.id, round=3).version == 2  # nothing changed: no new version
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")]
    assert room.stop(p.id) and room.read() is None and not room.stop(p.id)


def test_a_second_presenter_takes_over_and_the_first_can_no_longer_write(tmp_path):
    room = PresentationStore(tmp_path)
    first, _ = room.start(new_token(), 1)
    room.add_point(first.id, point())
    second, before = room.start(new_token(), 0)
    assert before == first and second.id != first.id and second.version > first.version
    assert room.update(first.id, round=9) is None  # the first presenter's page learns it was taken over
    assert not room.stop(first.id) and room.read() == second
    assert not room.board_path(first.id).exists()  # the old board went with it
    assert not room.add_point(first.id, point())


@pytest.mark.parametrize(
    "content",
    [b"", b"not json", b"[]", b'{"id": "x"}', b"\xff\xfe", b"[" * 100_000, b" " * 5000,
     json.dumps({"id": "../../../etc/passwd", "run": "A" * 22, "started_at": 1, "round": 0, "selected_round": None, "version": 1, "show_board": False}).encode(),
     json.dumps({"id": "A" * 22, "run": "B" * 22, "started_at": 1, "round": -1, "selected_round": None, "version": 1, "show_board": False}).encode(),
     json.dumps({"id": "A" * 22, "run": "B" * 22, "started_at": 1, "round": 0, "selected_round": None, "version": 1, "show_board": "yes"}).encode(),
     json.dumps({"id": "A" * 22, "run": "B" * 22, "started_at": 1, "round": 0, "selected_round": None, "version": 1, "show_board": False, "key": "x"}).encode()],
)  # fmt: skip
def test_a_hostile_presentation_file_reads_as_none(tmp_path, content):
    room = PresentationStore(tmp_path)
    room.path.write_bytes(content)
    assert room.read() is None
    room.start(new_token(), 0)  # and a presenter can still start over it
    assert room.read() is not None


def test_the_presentation_file_holds_no_secret_and_is_not_evicted_as_a_run(tmp_path):
    room = PresentationStore(tmp_path)
    p, _ = room.start(new_token(), 0)
    assert set(json.loads(room.path.read_text())) == set(Presentation.__dataclass_fields__)
    RunStore(tmp_path, max_bytes=1).evict()  # a full run directory evicts runs, never the presentation
    assert room.read() == p


def test_the_board_keeps_the_latest_point_per_fork_skips_hostile_lines_and_is_capped(tmp_path, monkeypatch):
    room = PresentationStore(tmp_path)
    p, _ = room.start(new_token(), 0)
    a, b = new_id(), new_id()
    assert room.add_point(p.id, point(a, rounds=1, speedup=None))
    assert room.add_point(p.id, point(b, drafter="lookup", temperature=0.0))
    assert room.add_point(p.id, point(a, rounds=2, speedup=1.5))
    with open(room.board_path(p.id), "ab") as f:
        for bad in (b"garbage", b'{"fork": "x"}', json.dumps(point(alpha=7.0).__dict__).encode(), json.dumps(point(drafter="<script>").__dict__).encode(), b"[" * 600, b"\xff"):
            f.write(bad + b"\n")
    points = room.points(p.id)
    assert [(q.fork, q.rounds) for q in points] == [(a, 2), (b, 5)]
    path = room.board_path(p.id)
    monkeypatch.setattr(pres, "MAX_BOARD_BYTES", path.stat().st_size + 10)
    c = new_id()
    assert room.add_point(p.id, point(c))  # full: compacted to each fork's latest point, then it fits
    assert [(q.fork, q.rounds) for q in room.points(p.id)] == [(a, 2), (b, 5), (c, 5)]
    assert path.read_bytes().count(b"\n") == 3 and oct(path.stat().st_mode & 0o777) == "0o600"
    monkeypatch.setattr(pres, "MAX_BOARD_BYTES", path.stat().st_size + 10)
    assert room.add_point(p.id, point())  # a board of distinct forks only: the new fork's point is dropped
    assert path.stat().st_size <= pres.MAX_BOARD_BYTES and len(room.points(p.id)) == 3
    with pytest.raises(ValueError):
        room.board_path("../x")


def test_one_fork_stepping_forever_never_fills_the_board(tmp_path, monkeypatch):
    """Measured before: 20 Steps a second, +176 B each, filled the 2 MiB board in about 10 minutes, after which every
    fork's point was dropped. Now a full board is compacted: the busy fork holds one line, the others keep theirs."""
    monkeypatch.setattr(pres, "MAX_BOARD_BYTES", 4096)
    room = PresentationStore(tmp_path)
    p, _ = room.start(new_token(), 0)
    busy, quiet = new_id(), new_id()
    room.add_point(p.id, point(quiet, rounds=3))
    for rounds in range(1, 400):  # about 70 kB of points from one fork
        assert room.add_point(p.id, point(busy, rounds=rounds))
        assert room.board_path(p.id).stat().st_size <= 4096
    late = new_id()
    assert room.add_point(p.id, point(late, rounds=1))
    assert {(q.fork, q.rounds) for q in room.points(p.id)} == {(quiet, 3), (busy, 399), (late, 1)}


def test_a_board_that_cannot_be_written_raises_and_a_full_disk_says_so(tmp_path, monkeypatch):
    room = PresentationStore(tmp_path)
    p, _ = room.start(new_token(), 0)

    class NoSpace:
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def write(fd, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pres, "os", NoSpace())
    with pytest.raises(OSError) as caught:
        room.add_point(p.id, point())
    assert "disk is full" in write_problem(caught.value)
    assert room.read() == p  # the presentation is still live: the page says the board missed a round, not that it ended


def test_the_board_frame_and_figure(tmp_path):
    points = [point(temperature=0.0, alpha=0.7, speedup=1.6), point(temperature=1.0, alpha=0.4, speedup=1.1), point(k=2, speedup=None)]
    df = board_frame(points, lambda d: d.upper())
    assert list(df["band"]) == ["greedy (T = 0)", "T = 1", "T = 1"] and set(df["drafter_name"]) == {"NGRAM"}
    fig = board_figure(df)
    markers = [t for t in fig.data if t.mode == "markers"]
    assert sum(len(t.x) for t in markers if "measuring" not in t.name) == 2
    assert [len(t.x) for t in markers if "measuring" in t.name] == [1]  # hollow, at its tokens per pass
    assert {t.name for t in fig.data if t.mode == "lines"} == {"ceiling, k = 2", "ceiling, k = 4"}
    assert len(board_table(df)) == 3 and temperature_band(1.5) == "T > 1"
    assert len(board_figure(board_frame([])).data) == 0


def test_the_key_wrong_empty_none_and_rate_limited():
    assert presenter_key({}, {}) is None and presenter_key({"SPECVIZ_PRESENTER_KEY": "  "}, {}) is None
    assert presenter_key({}, {"presenter_key": "s3cret"}) == "s3cret"
    assert presenter_key({"SPECVIZ_PRESENTER_KEY": "env"}, {"presenter_key": "s3cret"}) == "env"
    assert check_key("s3cret", "s3cret") and not check_key("s3cre", "s3cret") and not check_key("", "s3cret")
    assert not check_key("anything", None) and not check_key(None, "s3cret") and not check_key(["s3cret"], "s3cret")
    gate = KeyGate()
    assert gate.attempt("x", None, now=0) == ("off", 0.0)
    assert gate.attempt("", "k", now=0) == ("empty", 0.0)
    assert gate.attempt("a", "k", now=0) == ("wrong", 0.0) and gate.attempt("b", "k", now=0) == ("wrong", 0.0)
    verdict, wait = gate.attempt("c", "k", now=0)
    assert verdict == "wrong" and wait == pres.LOCK_S
    assert gate.attempt("k", "k", now=1)[0] == "locked"  # even the right key waits out the lock
    assert gate.attempt("d", "k", now=pres.LOCK_S + 1) == ("wrong", 2 * pres.LOCK_S)  # doubling
    assert gate.attempt("k", "k", now=100) == ("ok", 0.0) and gate.wrong == 0


def test_the_key_in_the_secrets_table_is_accepted_by_the_policy_and_not_kept_in_it():
    policy = load_policy(env={}, secrets={"presenter_key": "s3cret", "mode": "shared"})
    assert "s3cret" not in repr(policy)
