"""The race page in AppTest (pages/race.py), on the tiny llama in shared mode with a run directory: a race runs and
shows identical greedy text, a saved race plays without a model, a sampled race explains why the texts differ, the
probe form offers only the owner's listed services, and the room exercise counts guesses and reveals the answer only
with the presenter key."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from specviz.core.race import RaceResult, lane_of
from specviz.ui.labs import probe as probe_ui
from specviz.ui.labs import race as race_ui
from specviz.workshop.race_room import Pair, RaceRoom
from tests.test_app_saved_runs import room_env, room_runs  # noqa: F401  (fixtures)
from tests.test_app_shared import PAGES, click

PROMPT = "the cat sat on the mat and the dog sat on the log the cat sat on the"
KEY = "correct horse battery staple"
SETTINGS = {"prompt": PROMPT, "drafter": "lookup", "num_draft_tokens": 4, "max_new_tokens": 16}


def texts(at: AppTest) -> str:
    return " ".join(e.value for kind in (at.error, at.warning, at.info, at.success, at.caption) for e in kind)


def page(**state) -> AppTest:
    at = AppTest.from_file(str(PAGES / "race.py"), default_timeout=180)
    for key, value in (SETTINGS | state).items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def saved_race(temperature: float = 0.0) -> RaceResult:
    plain = lane_of("plain decoding", [0.1, 0.2, 0.3, 0.4], [[5], [6], [7], [8]], 0.05)
    spec = lane_of("prompt lookup, k=4", [0.1, 0.15], [[5], [6, 7, 8]] if temperature == 0 else [[5], [8, 7, 6]], 0.05)
    texts = {5: "the", 6: " cat", 7: " <b>sat</b>", 8: " on"}
    return RaceResult("p", (1, 2), "tiny", "float32", "lookup", "prompt lookup, k=4", 4, temperature, 0, 4, plain, spec, texts)


def test_the_page_starts_without_a_race(room_env):  # noqa: F811
    at = page()
    assert "Press Start the race" in texts(at).replace("**", "")
    assert [b for b in at.button if b.key == "race_start"]
    keys = {w.key for w in at.selectbox}
    assert "compare" not in keys  # the sidebar without compare mode or Play's pace
    assert "play_every" not in {w.key for w in at.select_slider}


def test_a_greedy_race_runs_and_says_identical_text(room_env):  # noqa: F811
    at = page()
    click(at, "race_start")
    race = at.session_state[race_ui.RACE_KEY]
    assert race.identical and race.plain.num_tokens == 16
    assert "Identical text" in texts(at)
    labels = {m.label for m in at.metric}
    assert {"faster (time to last token)", "tokens per target pass"} <= labels
    # the speculative lane's acceptance histogram (vLLM's names), its bars the lane's own verify steps
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "acceptance_histogram" in c.proto.spec]
    assert len(charts) == 1 and [int(t[2:]) for t in charts[0]["data"][0]["text"]] == list(race.speculative.spec_decode.acceptance_histogram)
    assert "a tall bar at 0 is drafting wasted" in texts(at)
    assert "Gaps between" in " ".join(c.value for c in at.caption) or at.get("plotly_chart")


def test_drafter_none_has_nothing_to_race(room_env):  # noqa: F811
    at = page(drafter="none")
    click(at, "race_start")
    assert "drafter other than none" in texts(at)


def test_a_saved_race_plays_without_a_model(room_env, no_model):  # noqa: F811
    at = AppTest.from_file(str(PAGES / "race.py"), default_timeout=60)
    at.session_state[race_ui.RACE_KEY] = RaceResult.from_json(json.loads(json.dumps(saved_race().to_json())))
    at.run()
    assert not at.exception
    assert "Identical text" in texts(at) and no_model == []
    assert {m.label: m.value for m in at.metric}["faster (time to last token)"] == "2.67×"


def test_a_sampled_race_explains_why_the_texts_differ(room_env, no_model):  # noqa: F811
    at = AppTest.from_file(str(PAGES / "race.py"), default_timeout=60)
    at.session_state[race_ui.RACE_KEY] = saved_race(temperature=1.0)
    at.run()
    assert not at.exception
    assert "Two samples, one distribution" in texts(at)


def test_the_probe_offers_only_the_owners_services(room_env, monkeypatch):  # noqa: F811
    at = page()
    assert "probes no services" in texts(at)  # shared mode, nothing listed
    monkeypatch.setenv("SPECVIZ_PROBE_URLS", "http://127.0.0.1:8001/v1,http://127.0.0.1:8002/v1")
    at = page()
    choice = at.selectbox(key="probe_url_choice")
    assert choice.options == ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]
    assert not [w for w in at.text_input if w.key == "probe_url"]  # no free-text URL for a participant
    forced = page(probe_url_choice="http://127.0.0.1:8501/_stcore/health")
    assert "was reset to its default" in texts(forced)
    assert forced.selectbox(key="probe_url_choice").value == "http://127.0.0.1:8001/v1"


def test_the_owner_types_any_url(monkeypatch, tiny_dir, tmp_path):
    monkeypatch.setenv("SPECVIZ_MODE", "local")
    monkeypatch.setenv("SPECVIZ_RUN_DIR", str(tmp_path))
    at = page(target=str(tiny_dir["llama"]))
    assert at.text_input(key="probe_url").value == probe_ui.LOCAL_URL


@pytest.fixture()
def room(room_runs, monkeypatch):  # noqa: F811
    """The race page's room on each backend of the room's store in turn (tests/store_helpers.py)."""
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    return RaceRoom(room_runs.store)


@pytest.fixture()
def pair(room, monkeypatch):
    urls = ("http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1")
    monkeypatch.setenv("SPECVIZ_PROBE_URLS", ",".join(urls))
    p = Pair.new(urls, speculating=1, drafter="lookup")
    room.start_pair(p)
    return p


def test_the_room_guesses_and_the_presenter_reveals(pair, room):
    at = page()
    assert "Which service speculates?" in [h.value for h in at.header]
    assert at.selectbox(key="probe_url_choice").format_func("http://127.0.0.1:8002/v1").startswith("service B")
    assert "Service B speculates" not in texts(at)  # not before the reveal
    at.radio(key="race_guess").set_value("service B").run()
    click(at, "race_guess_submit")
    other = page()
    other.radio(key="race_guess").set_value("service A").run()
    click(other, "race_guess_submit")
    assert room.tally(pair.id) == {"A": 1, "B": 1}
    at.text_input(key="race_reveal_key").input("wrong")
    click(at, "race_reveal")
    assert "not the presenter key" in texts(at) and not room.revealed(pair.id)
    at.text_input(key="race_reveal_key").input(KEY)
    click(at, "race_reveal")
    assert "Service B speculates" in texts(at).replace("**", "") and "1 of 2 guessed right" in texts(at)
    assert not [r for r in at.radio if r.key == "race_guess"]  # guesses close with the answer out
    assert "race_reveal_key" not in at.session_state or at.session_state["race_reveal_key"] == ""  # the key is not kept


def test_the_presenter_shows_a_race_that_followers_play_without_the_model(pair, room, no_model):
    at = AppTest.from_file(str(PAGES / "race.py"), default_timeout=60)
    at.session_state[race_ui.RACE_KEY] = saved_race()
    at.run()
    at.text_input(key="race_present_key").input(KEY)
    click(at, "race_show")
    assert room.race() == saved_race()
    follower = AppTest.from_file(str(PAGES / "race.py"), default_timeout=60).run()
    assert not follower.exception
    assert follower.radio(key="race_source").value == "the presenter's race"
    assert "Identical text" in texts(follower) and no_model == []


def test_a_participant_runs_one_probe_at_a_time_within_a_deadline(room_env, monkeypatch):  # noqa: F811
    """Issue 42: while one of a participant's probes runs, another is refused with a message; a participant's probe
    ends by PROBE_DEADLINE_S (the probe's own limits: tests/test_probe_limits.py)."""
    from specviz.ui.common.client import current_client

    monkeypatch.setenv("SPECVIZ_PROBE_URLS", "http://127.0.0.1:8001/v1")
    specs = []

    def fake_probe(spec, *args, **kwargs):
        specs.append(spec)
        raise ValueError("the fake service is not there")

    monkeypatch.setattr(probe_ui, "probe", fake_probe)
    at = page(probe_model="m")
    submit = next(b for b in at.button if "Probe" in b.label)
    with probe_ui._probes.hold(current_client().address, "a probe"):  # the same participant's probe, still running
        submit.click().run()
    assert "already have a probe running" in texts(at) and specs == []
    submit = next(b for b in at.button if "Probe" in b.label)
    submit.click().run()
    assert "the fake service is not there" in texts(at)
    assert [s.deadline_s for s in specs] == [probe_ui.PROBE_DEADLINE_S]
    assert len(probe_ui._probes) == 0  # given back when the probe ended, even with an error


def test_a_probe_shows_the_servers_acceptance_length_beside_the_bursts(monkeypatch, tiny_dir, tmp_path):
    """Issue 45: a server that reports vLLM's metrics.speculative_decoding (a canned stream) gets its acceptance length
    on the page beside the τ the bursts inferred, with the difference and where it was read."""
    from tests.service_helpers import running
    from tests.test_probe_reports import VLLM, endpoint

    monkeypatch.setenv("SPECVIZ_MODE", "local")
    monkeypatch.setenv("SPECVIZ_RUN_DIR", str(tmp_path))
    at = page(target=str(tiny_dir["llama"]))
    with running(endpoint(VLLM, "usage")) as root:
        at.text_input(key="probe_url").set_value(root + "/v1")
        at.text_input(key="probe_model").set_value("m")
        next(b for b in at.button if "Probe" in str(b.label)).click().run()
    assert not at.exception, at.exception
    result = at.session_state[probe_ui.PROBE_KEY]
    shown = next(m for m in at.metric if m.label == "the server's acceptance length")
    assert shown.value == "2.50" and result.acceptance_length["reported"] == 2.5
    if result.report.tau is not None:
        assert shown.delta == f"{result.report.tau - 2.5:+.2f} bursts − server"
    assert "vLLM metrics.speculative_decoding" in texts(at) and "draft acceptance rate 0.38" in texts(at)


def test_a_guess_made_while_the_rooms_store_is_away_is_kept_and_sent_when_it_is_back(redis_server, room_env, monkeypatch):  # noqa: F811
    """Redis goes away during the exercise: the page says the room's store is unreachable instead of failing, the
    guess submitted meanwhile stays on the page, and its next run after Redis is back sends it (nothing lost)."""
    from specviz.workshop.store import open_store

    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    monkeypatch.setenv("SPECVIZ_STORE", redis_server.url)
    urls = ("http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1")
    monkeypatch.setenv("SPECVIZ_PROBE_URLS", ",".join(urls))
    exercise = Pair.new(urls, speculating=1, drafter="lookup")
    RaceRoom(open_store()).start_pair(exercise)
    at = page()
    assert "Which service speculates?" in [h.value for h in at.header]
    at.radio(key="race_guess").set_value("service B").run()
    redis_server.stop()
    click(at, "race_guess_submit")
    assert "The room's store is unreachable" in texts(at) and "waits for the room's store" in texts(at)
    redis_server.start()
    at.run()
    assert not at.exception and RaceRoom(open_store()).tally(exercise.id) == {"A": 0, "B": 1}
    assert "unreachable" not in texts(at) and "Your guess: service B" in texts(at)
