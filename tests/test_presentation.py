"""The room's presentation store (plain Python, no app): atomic writes, takeover that keeps the board (a new board
only when asked), a presentation only its holder moves, anyone with the key stops, one that ends by itself when its
presenter's heartbeat stops (written rarely, without a new version), hostile files that read as nothing, and a
capped board validated line by line; on both backends of the room's store (a run directory and a real redis-server:
tests/store_helpers.py), followers told of a change by pub/sub on Redis, and a store that cannot be reached said as
such, never read as "no presentation". The key itself: tests/test_presenter_key.py."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest

from specviz.viz.board import board_figure, board_frame, board_table, temperature_band
from specviz.workshop import presentation as pres
from specviz.workshop.lesson import LessonMarks, session_digest
from specviz.workshop.policy import Policy, load_policy
from specviz.workshop.presentation import FILE_NAME, BoardPoint, Presentation, PresentationStore, heartbeat_every_s, new_id
from specviz.workshop.race_room import Pair, RaceRoom, voter_id
from specviz.workshop.saved_runs import RunStore, new_token, write_problem
from specviz.workshop.store import StoreUnavailable, directory
from specviz.workshop.store import redis_store as redis_backend


def point(fork: str | None = None, **changes) -> BoardPoint:
    base = dict(fork=fork or new_id(), drafter="ngram", k=4, temperature=1.0, rounds=5, alpha=0.5, tokens_per_target_pass=1.8, speedup=1.3, at=1.0)
    return BoardPoint(**(base | changes))


def stored(room: PresentationStore, name: str) -> bytes | None:
    return room.store.get(name, 10 * pres.MAX_BOARD_BYTES)


def on_disk(room: PresentationStore) -> Path | None:
    """The run directory of a directory-backed room (None on Redis)."""
    return room.store.root if isinstance(room.store, directory.DirectoryStore) else None


def test_start_update_stop_and_the_file_is_atomic_and_private(room_store):
    room = PresentationStore(room_store)
    assert room.read() is None
    run = new_token()
    p, before = room.start(run, 2)
    assert before is None and room.read() == p and p.run == run and p.round == 2 and p.version == 1
    if on_disk(room):
        assert os.stat(on_disk(room) / FILE_NAME).st_mode & 0o077 == 0
    moved = room.update(p.id, p.holder, round=3)
    assert moved.version == 2 and room.read().round == 3
    assert room.update(p.id, p.holder, round=3).version == 2  # nothing changed: no new version
    assert not on_disk(room) or not [f for f in os.listdir(on_disk(room)) if f.startswith(".tmp-")]
    assert not room.stop(p.id, new_id())  # not its holder
    assert room.stop(p.id, p.holder) and room.read() is None and not room.stop(p.id, p.holder)


def test_a_takeover_keeps_the_board_and_the_followers_and_the_first_presenter_can_no_longer_write(room_store):
    """Known-bad before: a second presenter (or the first one after a reload) started a new presentation, and the
    board of the first one was deleted."""
    room = PresentationStore(room_store)
    first, _ = room.start(new_token(), 1)
    fork = point()
    room.add_point(first.id, fork)
    run = new_token()
    second, before = room.start(run, 3)
    assert before == first and second.id == first.id and second.holder != first.holder and second.version > first.version
    assert (second.run, second.round, second.selected_round) == (run, 3, None)
    assert [q.fork for q in room.points(second.id)] == [fork.fork]  # the board stays
    assert room.add_point(first.id, point())  # a fork of the presentation still adds to it
    assert room.update(first.id, first.holder, round=9) is None  # the first presenter's page learns it was taken over
    assert room.heartbeat(first.id, first.holder) is None
    assert not room.stop(first.id, first.holder) and room.read() == second
    assert room.update(second.id, second.holder, round=4).round == 4


def test_a_new_board_is_a_new_presentation_and_the_old_board_goes(room_store):
    room = PresentationStore(room_store)
    first, _ = room.start(new_token(), 1)
    room.add_point(first.id, point())
    second, before = room.start(new_token(), 0, new_board=True)
    assert before == first and second.id != first.id and second.version > first.version
    assert room.store.size(room.board_name(first.id)) == 0 and room.points(second.id) == []
    assert not room.add_point(first.id, point())


def test_anyone_with_the_key_stops_the_presentation_whoever_holds_it(room_store):
    room = PresentationStore(room_store)
    p, _ = room.start(new_token(), 1)
    room.add_point(p.id, point())
    assert not room.stop(new_id())  # another id: nothing
    assert room.stop(p.id) and room.read() is None and room.store.size(room.board_name(p.id)) == 0


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_presentation_without_its_presenter_ends_by_itself_and_the_heartbeat_is_written_rarely(room_store):
    """Known-bad before: an orphan (the presenter reloaded, the replica died) stayed live forever, even across a
    server restart."""
    clock, idle_s = Clock(), 15 * 60.0
    room = PresentationStore(room_store, idle_s=idle_s, clock=clock)
    p, _ = room.start(new_token(), 1)
    room.add_point(p.id, point())
    stamp = room.stamp()
    for _ in range(20):  # the presenter's page polls often; the file is written only when the heartbeat is due
        clock.now += 1.0
        assert room.heartbeat(p.id, p.holder) == p
    assert room.stamp() == stamp
    clock.now = p.heartbeat + heartbeat_every_s(idle_s)
    beat = room.heartbeat(p.id, p.holder)
    assert beat.heartbeat == clock.now and beat.version == p.version  # followers are not redrawn for a heartbeat
    clock.now = beat.heartbeat + idle_s - 1
    assert room.read() == beat  # still there
    assert PresentationStore(room_store).read() == beat  # a reader without an idle time (the push watcher) sees it as it is
    clock.now = beat.heartbeat + idle_s + 1  # the presenter's page went away: no heartbeat since
    assert room.read() is None and stored(room, FILE_NAME) is None and room.store.size(room.board_name(p.id)) == 0
    assert room.update(p.id, p.holder, round=2) is None
    fresh, before = room.start(new_token(), 0)
    assert before is None and fresh.id != p.id


def test_an_idle_presentation_found_by_start_is_ended_not_taken_over(room_store):
    clock = Clock()
    room = PresentationStore(room_store, idle_s=60.0, clock=clock)
    p, _ = room.start(new_token(), 1)
    clock.now += 61
    q, before = room.start(new_token(), 0)
    assert before is None and q.id != p.id


def test_the_presentation_idle_time_is_an_owner_setting():
    assert Policy().presentation_idle_minutes == 15
    assert load_policy(env={"SPECVIZ_PRESENTATION_IDLE_MINUTES": "5"}, server_address="0.0.0.0").presentation_idle_minutes == 5
    assert load_policy(env={}, secrets={"presentation_idle_minutes": 30}, server_address="0.0.0.0").presentation_idle_minutes == 30
    with pytest.raises(ValueError, match="SPECVIZ_PRESENTATION_IDLE_MINUTES"):
        load_policy(env={"SPECVIZ_PRESENTATION_IDLE_MINUTES": "0"}, server_address="0.0.0.0")


GOOD = {"id": "A" * 22, "run": "B" * 22, "started_at": 1, "round": 0, "selected_round": None, "version": 1, "show_board": False, "holder": "C" * 22, "heartbeat": 2.0}


@pytest.mark.parametrize(
    "content",
    [b"", b"not json", b"[]", b'{"id": "x"}', b"\xff\xfe", b"[" * 100_000, b" " * 5000,
     json.dumps(GOOD | {"id": "../../../etc/passwd"}).encode(),
     json.dumps(GOOD | {"round": -1}).encode(),
     json.dumps(GOOD | {"show_board": "yes"}).encode(),
     json.dumps(GOOD | {"holder": "x"}).encode(),
     json.dumps(GOOD | {"heartbeat": float("nan")}).encode(),
     json.dumps(GOOD | {"key": "x"}).encode(),
     json.dumps({k: v for k, v in GOOD.items() if k not in ("holder", "heartbeat")}).encode()],
)  # fmt: skip
def test_a_hostile_presentation_file_reads_as_none(room_store, content):
    assert Presentation.from_json(json.dumps(GOOD).encode()).id == "A" * 22  # the control: the good one reads
    room = PresentationStore(room_store)
    room.store.put(FILE_NAME, content)
    assert room.read() is None
    room.start(new_token(), 0)  # and a presenter can still start over it
    assert room.read() is not None


def test_the_presentation_file_holds_no_secret_and_is_not_evicted_as_a_run(room_store):
    room = PresentationStore(room_store)
    p, _ = room.start(new_token(), 0)
    assert set(json.loads(stored(room, FILE_NAME))) == set(Presentation.__dataclass_fields__)
    RunStore(room.store, max_bytes=1).evict()  # a full run directory evicts runs, never the presentation
    assert room.read() == p


def test_the_board_keeps_the_latest_point_per_fork_skips_hostile_lines_and_is_capped(room_store, monkeypatch):
    room = PresentationStore(room_store)
    p, _ = room.start(new_token(), 0)
    a, b = new_id(), new_id()
    assert room.add_point(p.id, point(a, rounds=1, speedup=None))
    assert room.add_point(p.id, point(b, drafter="lookup", temperature=0.0))
    assert room.add_point(p.id, point(a, rounds=2, speedup=1.5))
    name = room.board_name(p.id)
    for bad in (b"garbage", b'{"fork": "x"}', json.dumps(point(alpha=7.0).__dict__).encode(), json.dumps(point(drafter="<script>").__dict__).encode(), b"[" * 600, b"\xff"):
        room.store.append(name, bad)
    points = room.points(p.id)
    assert [(q.fork, q.rounds) for q in points] == [(a, 2), (b, 5)]
    monkeypatch.setattr(pres, "MAX_BOARD_BYTES", room.store.size(name) + 10)
    c = new_id()
    assert room.add_point(p.id, point(c))  # full: compacted to each fork's latest point, then it fits
    assert [(q.fork, q.rounds) for q in room.points(p.id)] == [(a, 2), (b, 5), (c, 5)]
    assert len(room.store.lines(name, pres.MAX_BOARD_BYTES)) == 3
    if on_disk(room):
        assert oct((on_disk(room) / name).stat().st_mode & 0o777) == "0o600"
    monkeypatch.setattr(pres, "MAX_BOARD_BYTES", room.store.size(name) + 10)
    assert room.add_point(p.id, point())  # a board of distinct forks only: the new fork's point is dropped
    assert room.store.size(name) <= pres.MAX_BOARD_BYTES and len(room.points(p.id)) == 3
    with pytest.raises(ValueError):
        room.board_name("../x")


def test_a_board_point_written_under_the_old_name_still_reads():
    """A point a replica wrote before tokens per target pass had one name ("tokens_per_pass") reads the same; a line
    with both names is not a point."""
    now = point(tokens_per_target_pass=2.5)
    old = {("tokens_per_pass" if k == "tokens_per_target_pass" else k): v for k, v in now.__dict__.items()}
    assert BoardPoint.from_json(json.dumps(old).encode()) == now == BoardPoint.from_json(now.to_json().encode())
    with pytest.raises(ValueError):
        BoardPoint.from_json(json.dumps(now.__dict__ | {"tokens_per_pass": 2.5}).encode())


def test_one_fork_stepping_forever_never_fills_the_board(room_store, monkeypatch):
    """Measured before: 20 Steps a second, +176 B each, filled the 2 MiB board in about 10 minutes, after which every
    fork's point was dropped. Now a full board is compacted: the busy fork holds one line, the others keep theirs."""
    monkeypatch.setattr(pres, "MAX_BOARD_BYTES", 4096)
    room = PresentationStore(room_store)
    p, _ = room.start(new_token(), 0)
    busy, quiet = new_id(), new_id()
    room.add_point(p.id, point(quiet, rounds=3))
    for rounds in range(1, 400):  # about 70 kB of points from one fork
        assert room.add_point(p.id, point(busy, rounds=rounds))
        assert room.store.size(room.board_name(p.id)) <= 4096
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

    monkeypatch.setattr(directory, "os", NoSpace())
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
    assert list(board_table(df)["measured speedup"]) == ["1.60×", "1.10×", "measuring…"]  # not a bare "None" for the third
    assert len(board_figure(board_frame([])).data) == 0


# --- Redis: announced changes, and a store that goes away ----------------------------------------------------------


def _subscribed(store, name: str) -> bool:
    """Whether a client listens for announcements of name's changes (Redis' PUBSUB NUMSUB)."""
    return dict(store.client.pubsub_numsub(f"{store.prefix}ch:{name}")).get(f"{store.prefix}ch:{name}".encode(), 0) > 0


def test_on_redis_a_change_wakes_the_watcher_by_pub_sub_not_by_a_poll(redis_server, monkeypatch):
    """Followers are told by pub/sub: with the fallback poll pushed out to a minute, a change made by another replica
    still wakes a waiting watcher at once. Known-bad control: without the announcement the wait would sit out its 30 s."""
    monkeypatch.setattr(redis_backend, "POLL_S", 60.0)
    room = PresentationStore(redis_backend.redis_store(redis_server.url))
    assert room.announced and not PresentationStore(directory.DirectoryStore("/nonexistent")).announced
    p, _ = room.start(new_token(), 1)
    since, woke = room.stamp(), {}
    waiter = threading.Thread(target=lambda: woke.setdefault("stamp", room.wait(since, 30.0)), daemon=True)
    waiter.start()
    deadline = time.monotonic() + 10
    while not _subscribed(room.store, FILE_NAME):  # the watcher listens now (gated, not slept)
        assert time.monotonic() < deadline and waiter.is_alive(), "the waiter never subscribed"
        time.sleep(0.01)
    assert "stamp" not in woke  # nothing changed yet, and the poll is a minute away
    PresentationStore(redis_backend.redis_store(redis_server.url)).update(p.id, p.holder, round=2)  # another replica moves on
    waiter.join(10)
    assert not waiter.is_alive() and woke["stamp"] != since and room.read().round == 2


def test_an_unreachable_store_is_said_never_read_as_none_and_nothing_is_lost(redis_server):
    """Redis goes away mid-room: every read and write of the presentation, the board, the lesson's marks and the
    exercise raises StoreUnavailable, whose words say the store is unreachable (a page shows them and keeps what it
    drew; known-bad: a read that took "unreachable" for "no presentation" ended every follower's view). When Redis is
    back (with its data, as a Redis with persistence), everything done before is there and writes work again."""
    store = redis_backend.redis_store(redis_server.url)
    room, marks, race = PresentationStore(store, idle_s=900.0), LessonMarks(store), RaceRoom(store)
    p, _ = room.start(new_token(), 1)
    fork = point()
    room.add_point(p.id, fork)
    me = session_digest("a secret")
    marks.record(p.id, me, {1})
    pair = Pair.new(("http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"), speculating=0, drafter="lookup")
    race.start_pair(pair)
    race.guess(pair.id, voter_id("a"), "A")
    redis_server.stop()
    calls = [room.read, room.stamp, lambda: room.update(p.id, p.holder, round=2), lambda: room.heartbeat(p.id, p.holder),
             lambda: room.start(new_token(), 0), lambda: room.stop(p.id), lambda: room.add_point(p.id, point()),
             lambda: room.points(p.id), lambda: marks.counts(p.id), lambda: marks.record(p.id, me, {1, 2}), race.pair,
             lambda: race.tally(pair.id), lambda: race.guess(pair.id, voter_id("b"), "B"), lambda: race.reveal(pair.id), race.stamp]  # fmt: skip
    for call in calls:
        with pytest.raises(StoreUnavailable) as caught:
            call()
        assert "unreachable" in write_problem(caught.value)
    redis_server.start()
    assert room.read() == p and [q.fork for q in room.points(p.id)] == [fork.fork]
    assert marks.counts(p.id)[1] == 1 and race.pair() == pair and race.tally(pair.id) == {"A": 1, "B": 0}
    assert room.update(p.id, p.holder, round=2).round == 2 and marks.record(p.id, me, {1, 2})
