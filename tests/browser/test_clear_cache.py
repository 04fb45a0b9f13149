"""Any client can send Streamlit's clear_cache message (issue 32, item 2). Against a real `streamlit run app.py` with
the embedded model, spoken to with the protocol client (specviz/loadtest/protocol.py), no browser:

* the owner (loopback, no proxy header: local mode, where Streamlit handles the message) sends 20 clears, each
  followed by a page run that asks for the model, and a follower's page run that registers with the process's
  presentation watcher: the model is not loaded again ("Loading weights" in the log), the server's thread count and
  memory stay where they were, and a presenter Step still pushes exactly one redraw to the follower. The control
  that each clear was handled: the owner's page restores its run from its link (Streamlit cleared the sender's
  state), which a rerun without a clear does not.
* the presenter, a participant (a proxy header: shared mode), sends 20 clears too: they are dropped
  (specviz.ui.common.backmsgs; the log says so) and it still presents (its session state is intact).

And a known-bad control on a small app of the test's own: a thread started from an st.cache_resource function is
started again after every clear (one more thread per clear, as specviz's watcher did), one from a process singleton
(specviz.workshop.resources) once."""

from __future__ import annotations

import re
import textwrap
import time

import psutil
import pytest

from specviz.loadtest.presenter import shown_round
from specviz.loadtest.protocol import StSession
from specviz.workshop.presentation import PresentationStore
from tests.browser.conftest import REPO, run_app

KEY = "a presenter key for the clear-cache test"
CLEARS = 20
PARTICIPANT = {"X-Forwarded-For": "198.51.100.7"}  # as behind a proxy: never the owner, shared mode
PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."
QUERY = {"prompt": PROMPT, "drafter": "ngram", "seed": "0", "max_new_tokens": "64"}
PUSH_TIMEOUT_S = 60  # a pushed redraw is due within about a second; the machine is busy
QUIET_S = 3.0  # after the one pushed redraw, how long to listen for a second one
THREADS_BACK_WITHIN_S = 60  # a script run's thread ends right after the run: the count settles
MEMORY_SLACK_MB = 300  # a model load costs about 550 MB; the sessions' own runs a few MB
LOADS = re.compile(r"Loading weights:\s+0%")  # transformers' progress bar, once per model load


def threads_settle(pid: int, at_most: int) -> int:
    """The server's thread count once it is at most `at_most` (polled), or the last count read after the deadline."""
    deadline = time.monotonic() + THREADS_BACK_WITHIN_S
    while True:
        count = psutil.Process(pid).num_threads()
        if count <= at_most or time.monotonic() > deadline:
            return count
        time.sleep(0.5)


def idle_threads(pid: int, reads: int = 5) -> int:
    """The server's thread count at rest: the least of a few reads (a script run's thread may still be ending)."""
    counts = []
    for _ in range(reads):
        counts.append(psutil.Process(pid).num_threads())
        time.sleep(0.5)
    return min(counts)


def step_pushes(presenter: StSession, follower: StSession, expected_round: int) -> int:
    """The presenter Steps; how many redraws the server pushed to the follower (the first one must show the round)."""
    presenter.click("step")
    first = follower.wait_for_run(PUSH_TIMEOUT_S)
    assert first is not None, "no redraw was pushed to the follower"
    assert shown_round(follower) == expected_round, follower.alerts()
    pushed = 1
    while follower.wait_for_run(QUIET_S) is not None:
        pushed += 1
    return pushed


def mode_line(session: StSession) -> str:
    return next((t for t in session.texts() if t.startswith(("Local mode", "Shared mode"))), "")


@pytest.mark.smollm
def test_twenty_clears_leave_the_model_the_threads_and_the_pushes_alone(tmp_path):
    run_dir = tmp_path / "runs"
    env = {"SPECVIZ_PRESENTER_KEY": KEY, "SPECVIZ_RUN_DIR": str(run_dir)}
    with run_app(tmp_path / "server.log", env=env) as server:
        presenter = StSession(server.url, QUERY, headers=PARTICIPANT)
        follower = StSession(server.url, headers=PARTICIPANT)
        owner = StSession(server.url, QUERY)
        try:
            presenter.open()
            assert mode_line(presenter).startswith("Shared mode"), presenter.texts()
            presenter.click("step")
            presenter.set_widget("present_key", KEY)
            presenter.click("present")
            assert any("You are presenting" in t for t in presenter.alerts()), presenter.alerts()
            follower.open()
            assert shown_round(follower) == 1, follower.alerts()
            owner.open()
            assert mode_line(owner).startswith("Local mode"), owner.texts()
            owner.set_widget("follow", False)  # its own run, not the presenter's
            owner.click("step")
            owner.rerun()
            assert owner.metric("rounds") == "1" and not any("Restored this run" in a for a in owner.alerts())
            assert step_pushes(presenter, follower, 2) == 1  # the watcher runs (and its thread exists) before we count

            process = psutil.Process(server.pid)
            threads_before = idle_threads(server.pid)
            rss_before, loads_before = process.memory_info().rss, len(LOADS.findall(server.log()))
            assert loads_before >= 1, "the log shows no model load at all: this test could not see one"
            for n in range(CLEARS):
                owner.clear_cache()  # local mode: Streamlit clears its caches and the owner's session state
                owner.rerun()  # the page asks for the model again
                restored = any("Restored this run" in a for a in owner.alerts())  # from its link: its state was gone
                assert restored, f"the control: clear {n + 1} was not handled (the owner's session state is still there)"
                presenter.clear_cache()  # shared mode: dropped
                follower.rerun()  # the follower's stage registers with the process's watcher again
                assert shown_round(follower) == 2 and not follower.exceptions() and not owner.exceptions()

            log = server.log()
            assert len(LOADS.findall(log)) == loads_before, "the model was loaded again after a clear"
            threads_after = threads_settle(server.pid, threads_before)
            assert threads_after <= threads_before, f"threads {threads_before} -> {threads_after} after {CLEARS} clears"
            grown_mb = (process.memory_info().rss - rss_before) / 2**20
            assert grown_mb < MEMORY_SLACK_MB, f"the server grew {grown_mb:.0f} MB over {CLEARS} clears"
            assert log.count("refused a clear_cache message") == 1, "the participant's clears: refused, logged once per session"
            assert step_pushes(presenter, follower, 3) == 1  # still exactly one redraw per presenter Step
            assert PresentationStore(run_dir).read().round == 3  # the presenter still presents: its state survived
            print(f"{CLEARS} clears: threads {threads_before} -> {threads_after}, RSS {rss_before / 2**20:.0f} MB +{grown_mb:.0f} MB, model loads {loads_before} -> {loads_before}")
        finally:
            for session in (presenter, follower, owner):
                session.close()


CONTROL_APP = '''
"""The clear-cache control: one thread started from st.cache_resource, one from a process singleton."""
import threading

import streamlit as st

from specviz.workshop.resources import singleton


def start(name: str) -> threading.Thread:
    thread = threading.Thread(target=threading.Event().wait, name=name, daemon=True)
    thread.start()
    return thread


@st.cache_resource
def streamlit_watcher() -> threading.Thread:
    return start("control-st-cached")


streamlit_watcher()
singleton("control-watcher", lambda: start("control-registry"))
names = [t.name for t in threading.enumerate()]
st.markdown(f"st-cached {names.count('control-st-cached')} registry {names.count('control-registry')}")
'''


def test_known_bad_control_a_clear_restarts_what_st_cache_resource_started(tmp_path):
    app = tmp_path / "control_app.py"
    app.write_text(textwrap.dedent(CONTROL_APP), encoding="utf-8")
    with run_app(tmp_path / "control.log", env={"PYTHONPATH": str(REPO)}, script=str(app)) as server, StSession(server.url) as session:
        assert "st-cached 1 registry 1" in session.texts(), session.texts()
        for _ in range(CLEARS):
            session.clear_cache()
            session.rerun()
        assert f"st-cached {CLEARS + 1} registry 1" in session.texts(), session.texts()
