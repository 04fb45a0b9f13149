"""The race (specviz/experiments/race.py) on the tiny llama, and its record (specviz/core/race.py): greedy lanes commit
the same ids, the record round-trips through JSON, and a hostile file is refused with a message."""

from __future__ import annotations

import copy
import json
import time

import pytest

from specviz.config import RunConfig
from specviz.core.metrics import SpecDecodeSteps
from specviz.core.race import RaceResult, lane_of
from specviz.experiments.race import lane_label, run_race, time_lane
from specviz.runs import resolve_models

PROMPT = "the cat sat on the mat and the dog sat on the log the cat sat on the"


def race_on(tiny_models, tiny_dir, **fields):
    target = tiny_models["llama"]
    config = RunConfig(target=str(tiny_dir["llama"]), drafter="lookup", num_draft_tokens=4, max_new_tokens=24, chat=False, **{"auto_k": False, **fields})
    models = resolve_models(config, target=target)
    ids = target.tokenizer(PROMPT)["input_ids"]
    return run_race(config, models, PROMPT, ids, lambda t: target.tokenizer.decode([t]))


@pytest.fixture(scope="module")
def greedy_race(tiny_models, tiny_dir):
    return race_on(tiny_models, tiny_dir)


def test_greedy_lanes_commit_the_same_ids(greedy_race, one_thread):
    race = greedy_race
    assert race.greedy and race.identical and race.first_difference is None
    assert race.plain.tokens == race.speculative.tokens and race.plain.num_tokens == 24
    assert race.plain.tokens_per_target_pass == 1.0  # plain decoding: one token per pass
    assert race.speculative.target_passes < race.plain.target_passes  # the tiny llama repeats itself: lookup guesses right
    assert race.speculative.tokens_per_target_pass > 1.0
    assert race.speculative.label == "prompt lookup, k=4"


def test_commit_times_rise_and_rounds_share_a_time(greedy_race):
    for lane in greedy_race.lanes:
        assert list(lane.commit_s) == sorted(lane.commit_s)
        assert 0 < lane.prefill_s <= lane.ttft_s <= lane.last_s
        times = lane.token_times()
        assert len(times) == lane.num_tokens
    spec = greedy_race.speculative
    sizes = [len(r) for r in spec.ids]
    assert max(sizes) > 1 and spec.token_times().count(spec.commit_s[sizes.index(max(sizes))]) == max(sizes)


def test_the_race_round_trips_through_json(greedy_race):
    data = json.loads(json.dumps(greedy_race.to_json()))
    again = RaceResult.from_json(data)
    assert again == greedy_race
    assert again.text(again.speculative) == greedy_race.text(greedy_race.plain)


def test_the_speculative_lane_carries_its_verify_steps(greedy_race):
    """Issue 45: the speculative lane holds vLLM's per-step counts (its acceptance histogram), plain decoding none; a race
    saved before lanes carried them still loads."""
    spec = greedy_race.speculative
    steps = spec.spec_decode
    assert greedy_race.plain.spec_decode is None and steps is not None and steps.num_spec_tokens == 4
    assert steps.num_spec_steps <= spec.target_passes and sum(steps.acceptance_histogram) == steps.num_spec_steps
    # every round that drafted commits its kept drafts plus one token of the target's own
    assert steps.num_accepted_draft_tokens + spec.target_passes == spec.num_tokens
    lanes = greedy_race.to_json()["lanes"]
    assert "speculative_decoding" not in lanes["plain"] and lanes["speculative"]["speculative_decoding"]["acceptance_histogram"]
    old = json.loads(json.dumps(greedy_race.to_json()))
    del old["lanes"]["speculative"]["speculative_decoding"]
    assert RaceResult.from_json(old).speculative.spec_decode is None


def test_a_sampled_race_runs_and_says_it_is_sampled(tiny_models, tiny_dir, one_thread):
    race = race_on(tiny_models, tiny_dir, temperature=1.0, seed=5)
    assert not race.greedy and race.plain.num_tokens == 24 == race.speculative.num_tokens


def test_plain_decoding_cannot_race_itself(tiny_models, tiny_dir):
    with pytest.raises(ValueError, match="drafter other than none"):
        race_on_none(tiny_models, tiny_dir)


def race_on_none(tiny_models, tiny_dir):
    target = tiny_models["llama"]
    config = RunConfig(target=str(tiny_dir["llama"]), drafter="none", max_new_tokens=4, chat=False)
    return run_race(config, resolve_models(config, target=target), PROMPT, [1, 2, 3], str)


def test_time_lane_takes_record_building_out(tiny_models, tiny_dir):
    """A lane's clock leaves out record_ms: with a decoder whose records say they took 1 s to build, the commits still
    come at about the round's own time, not a second apart."""
    from dataclasses import replace

    from specviz.runs import RunModels, build_decoder

    target = tiny_models["llama"]
    config = RunConfig(target="tiny", drafter="none", max_new_tokens=4, chat=False)
    decoder = build_decoder(config, RunModels(target), target.tokenizer(PROMPT)["input_ids"], baseline=True)
    step = decoder.step

    def slow_charts():
        return replace(step(), record_ms=1000.0)

    decoder.step = slow_charts
    lane = time_lane(lambda: decoder, "plain")
    assert lane.num_tokens == 4
    assert lane.last_s < 1.0  # four 1-s record builds would put it past 3 s


def test_lane_label_names_the_tree():
    assert lane_label(RunConfig(drafter="ngram", tree_width=2, num_draft_tokens=6, auto_k=False)) == "n-gram model, tree W=2, k=6"
    assert lane_label(RunConfig(drafter="lookup")) == "prompt lookup, k: auto"  # the default: k chosen each round


def good() -> dict:
    plain = lane_of("plain decoding", [0.1, 0.2, 0.3], [[5], [6], [7]], 0.05)
    spec = lane_of("prompt lookup, k=4", [0.1, 0.15], [[5], [6, 7]], 0.05, SpecDecodeSteps(4, (1,), (2,)))
    race = RaceResult("p", (1, 2), "tiny", "float32", "lookup", "prompt lookup, k=4", 4, 0.0, 0, 3, plain, spec, {5: "a", 6: "<b>", 7: "c"})
    return race.to_json()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.update(format="other"), "Not a race"),
        (lambda d: d.pop("prompt"), "wrong fields"),
        (lambda d: d.update(extra=1), "wrong fields"),
        (lambda d: d["lanes"]["plain"]["rounds"].reverse(), "backwards"),
        (lambda d: d["lanes"]["plain"]["rounds"][0].update(t=float("inf")), "number"),
        (lambda d: d["lanes"]["plain"]["rounds"][0].update(t=-1), "number"),
        (lambda d: d["lanes"]["plain"]["rounds"][0].update(ids=[]), "at least one token"),
        (lambda d: d["lanes"]["plain"]["rounds"][0].update(ids=["5"]), "token id"),
        (lambda d: d["lanes"]["plain"]["rounds"][0].update(ids=[True]), "token id"),
        (lambda d: d["lanes"]["plain"].update(rounds=[]), "rounds"),
        (lambda d: d["lanes"]["plain"].update(rounds=[{"t": 0.1, "ids": [5]}] * 2049), "rounds"),
        (lambda d: d["token_text"].pop("7"), "no text"),
        (lambda d: d["token_text"].update({"x": "y"}), "token ids"),
        (lambda d: d["token_text"].update({"9" * 5000: "y"}), "token ids"),  # past int()'s digit limit
        (lambda d: d["token_text"].update({"\u00b2": "y"}), "token ids"),  # a digit str.isdigit knows and int() refuses
        (lambda d: d["lanes"]["plain"]["rounds"][0].update(t=10**400), "number"),  # a float cannot hold it: not an OverflowError
        (lambda d: d["lanes"]["plain"].update(prefill_s=-(10**400)), "number"),
        (lambda d: d.update(created_at=10**4000), "created_at"),
        (lambda d: d.update(seed=10**4000), "seed"),
        (lambda d: d["token_text"].update({"5": "z" * 300}), "text of 0 to 256"),
        (lambda d: d.update(drafter="<script>"), "drafter"),
        (lambda d: d.update(temperature=9), "temperature"),
        (lambda d: d.update(seed=-1), "seed"),
        (lambda d: d.update(machine={str(i): "x" for i in range(20)}), "machine"),
        (lambda d: d.update(lanes=[]), "lanes must be"),
        (lambda d: d.update(prompt="x" * 20_001), "prompt"),
        (lambda d: d["lanes"]["speculative"].update(speculative_decoding=[]), "speculative_decoding must be"),
        (lambda d: d["lanes"]["speculative"]["speculative_decoding"].update(per_step_accepted=[3]), "accepted ≤ drafted"),
        (lambda d: d["lanes"]["speculative"]["speculative_decoding"].update(per_step_accepted=[1, 1, 1]), "per_step_accepted"),
        (lambda d: d["lanes"]["speculative"]["speculative_decoding"].update(num_spec_tokens=-1), "num_spec_tokens"),
        (lambda d: d["lanes"]["speculative"].update(other=1), "wrong fields"),
    ],
)
def test_a_damaged_race_is_refused_with_a_message(damage, message):
    data = copy.deepcopy(good())
    assert RaceResult.from_json(copy.deepcopy(data)).speedup == pytest.approx(2.0)  # the control loads
    damage(data)
    with pytest.raises(ValueError, match=message):
        RaceResult.from_json(data)
    with pytest.raises(ValueError):
        RaceResult.from_json([1, 2])


def test_another_sessions_turn_runs_inside_a_lane_and_between_the_lanes(tiny_models, tiny_dir):
    """Issue 42, item 6: a race gives the model back every few passes. Two other sessions ask for the model while the
    race holds it (inside the plain lane, and as the plain lane ends); each runs before the race's next piece, not
    after both decodes. Before: the race held one turn from its warm-up to its last round, so neither got in."""
    import threading
    from contextlib import contextmanager

    from specviz.workshop.queues import ModelQueue

    queue = ModelQueue("race-test")
    calls = [0]
    asked = {3: threading.Event(), 5: threading.Event()}  # the plain lane's 2nd piece, its last (24 rounds / 8 a turn)
    ran: dict[int, int] = {}  # victim -> how many race turns had begun when it ran

    @contextmanager
    def race_turn():
        with queue.turn(client="racer"):
            calls[0] += 1
            if calls[0] in asked:
                asked[calls[0]].set()
                deadline = time.monotonic() + 30
                while queue.waiting < 1:  # hold this piece until the other session stands in line (a condition, not a sleep)
                    assert time.monotonic() < deadline, "the other session never queued"
                    time.sleep(0.005)
            yield

    def victim(at: int) -> None:
        if asked[at].wait(60):
            with queue.turn(client=f"victim-{at}"):
                ran[at] = calls[0]

    threads = [threading.Thread(target=victim, args=(at,), daemon=True) for at in asked]
    for t in threads:
        t.start()
    target = tiny_models["llama"]
    config = RunConfig(target=str(tiny_dir["llama"]), drafter="lookup", num_draft_tokens=4, auto_k=False, max_new_tokens=24, chat=False)
    ids = target.tokenizer(PROMPT)["input_ids"]
    race = run_race(config, resolve_models(config, target=target), PROMPT, ids, str, turn=race_turn, passes_per_turn=8)
    for t in threads:
        t.join(10)
    assert ran == {3: 3, 5: 5}  # each ran right after the piece it waited behind: the race's next turn came after it
    assert calls[0] >= 7 and race.plain.num_tokens == 24 == race.speculative.num_tokens  # warm-up, 4 plain pieces, 2+ speculative


def test_a_lanes_clock_stops_while_it_waits_for_the_model(tiny_models, tiny_dir):
    """Another session holds the model for 2 s between two pieces of the plain lane: the lane's commits show no 2-s gap
    (before: the wait counted as the lane's time, so a race on a busy server slowed whichever lane was waited on)."""
    from contextlib import contextmanager

    from specviz.runs import RunModels, build_decoder

    target = tiny_models["llama"]
    config = RunConfig(target="tiny", drafter="none", max_new_tokens=12, chat=False)
    decoder = build_decoder(config, RunModels(target), target.tokenizer(PROMPT)["input_ids"], baseline=True)
    calls, other_session_s = [0], 2.0

    @contextmanager
    def busy_turn():
        calls[0] += 1
        if calls[0] == 3:  # between two pieces, another participant's work holds the model
            time.sleep(other_session_s)
        yield

    began = time.perf_counter()
    lane = time_lane(lambda: decoder, "plain", busy_turn, passes_per_turn=4)
    assert time.perf_counter() - began >= other_session_s and calls[0] == 4  # the prefill, then three pieces of 4 rounds
    gaps = [b - a for a, b in zip((0.0, *lane.commit_s), lane.commit_s)]
    assert max(gaps) < other_session_s and lane.last_s < time.perf_counter() - began - other_session_s + 0.5
