"""The race page's room files (specviz/workshop/race_room.py): the exercise's truth, guesses (one per voter, the last
counts), the reveal, the presenter's race; a damaged or hostile file reads as nothing; on both backends of the room's
store (a run directory and a real redis-server: tests/store_helpers.py)."""

from __future__ import annotations

import json

import pytest

from specviz.core.race import RaceResult, lane_of
from specviz.workshop import race_room
from specviz.workshop.race_room import RACE_FILE, TRUTH_FILE, Pair, RaceRoom, voter_id, votes_file
from specviz.workshop.store.directory import DirectoryStore

URLS = ("http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1")


def race() -> RaceResult:
    lane = lane_of("plain decoding", [0.1, 0.2], [[5], [6]])
    return RaceResult("p", (1,), "t", "float32", "lookup", "prompt lookup, k=4", 4, 0.0, 0, 2, lane, lane, {5: "a", 6: "b"})


def test_a_pair_round_trips_and_names_its_answer(room_store):
    room = RaceRoom(room_store)
    pair = Pair.new(URLS, speculating=0, drafter="lookup")
    room.start_pair(pair)
    assert room.pair() == pair and pair.answer == "A"
    assert [s.drafter for s in pair.services] == ["lookup", "none"]


@pytest.mark.parametrize("damage", [
    b"not json", b"[]", b'{"id": "x", "created_at": 1, "services": []}',
    json.dumps({"id": "a" * 22, "created_at": 1, "services": [
        {"name": "A", "url": URLS[0], "speculates": True, "drafter": "lookup"},
        {"name": "B", "url": URLS[1], "speculates": True, "drafter": "lookup"}]}).encode(),  # two that speculate
    json.dumps({"id": "a" * 22, "created_at": 1, "services": [
        {"name": "A", "url": "http://user@127.0.0.1:1/v1", "speculates": True, "drafter": "lookup"},
        {"name": "B", "url": URLS[1], "speculates": False, "drafter": "none"}]}).encode(),
    b"x" * 10_000,
])  # fmt: skip
def test_a_damaged_truth_reads_as_no_exercise(room_store, damage):
    room = RaceRoom(room_store)
    room.store.put(TRUTH_FILE, damage)
    assert room.pair() is None


def test_guesses_one_per_voter_the_last_counts(room_store):
    room = RaceRoom(room_store)
    pair = Pair.new(URLS, speculating=1, drafter="ngram")
    a, b = voter_id("secret-a"), voter_id("secret-b")
    room.guess(pair.id, a, "A")
    room.guess(pair.id, a, "B")
    room.guess(pair.id, b, "A")
    name = votes_file(pair.id)
    room.store.put(name, room.store.get(name, 4096) + ("not a vote\nzz A\n" + f"{b} C\n").encode())  # junk, a bad voter, a bad vote: skipped
    assert room.tally(pair.id) == {"A": 1, "B": 1}
    assert room.tally(Pair.new(URLS, 0, "lookup").id) == {"A": 0, "B": 0}  # another exercise's guesses are its own
    with pytest.raises(ValueError):
        room.guess(pair.id, a, "C")


def test_a_voter_holds_one_line_however_often_they_click(room_store):
    room = RaceRoom(room_store)
    pair = Pair.new(URLS, speculating=0, drafter="lookup")
    a, b = voter_id("secret-a"), voter_id("secret-b")
    room.guess(pair.id, a, "A")
    room.guess(pair.id, b, "B")
    size = room.store.size(votes_file(pair.id))
    for i in range(200):
        room.guess(pair.id, a, "AB"[i % 2])
    assert room.store.size(votes_file(pair.id)) == size  # a later click replaces the vote, never adds one
    if isinstance(room_store, DirectoryStore):
        assert len(list(room_store.root.iterdir())) == 2  # the votes and the lock: nothing left behind
    assert room.guesses(pair.id) == {a: "B", b: "B"}


def test_each_exercise_has_its_own_file_and_a_new_one_starts_empty(room_store):
    room = RaceRoom(room_store)
    first, second = Pair.new(URLS, 0, "lookup"), Pair.new(URLS, 1, "lookup")
    room.start_pair(first)
    room.guess(first.id, voter_id("a"), "A")
    assert room.store.get(votes_file(first.id), 4096) is not None
    room.start_pair(second)
    assert room.store.get(votes_file(first.id), 4096) is None  # the last exercise's votes go with it
    assert room.tally(second.id) == {"A": 0, "B": 0}
    room.guess(second.id, voter_id("a"), "B")
    assert room.tally(second.id) == {"A": 0, "B": 1}


def test_the_board_reads_the_votes_again_only_when_they_change(room_store, monkeypatch):
    room = RaceRoom(room_store)
    pair = Pair.new(URLS, 0, "lookup")
    room.guess(pair.id, voter_id("a"), "A")
    parses = []
    real = race_room.parse_votes
    monkeypatch.setattr(race_room, "parse_votes", lambda data: parses.append(len(data)) or real(data))
    for _ in range(20):  # every page's board, every few seconds
        assert room.tally(pair.id) == {"A": 1, "B": 0}
    assert len(parses) <= 1
    room.guess(pair.id, voter_id("b"), "B")
    assert room.tally(pair.id) == {"A": 1, "B": 1}  # a change is seen at once
    assert len(parses) <= 2


def test_the_reveal_belongs_to_one_exercise_and_a_new_one_hides_it(room_store):
    room = RaceRoom(room_store)
    first = Pair.new(URLS, 0, "lookup")
    room.start_pair(first)
    before = room.stamp()
    room.reveal(first.id)
    assert room.revealed(first.id) and room.stamp() != before
    second = Pair.new(URLS, 1, "lookup")
    room.start_pair(second)
    assert not room.revealed(second.id) and not room.revealed(first.id)


def test_the_presenters_race_and_a_hostile_one(room_store):
    room = RaceRoom(room_store)
    assert room.race() is None
    room.show_race(race())
    assert room.race() == race()
    room.store.put(RACE_FILE, json.dumps({**race().to_json(), "version": 99}).encode())
    assert room.race() is None
    room.hide_race()
    assert room.race() is None
