"""Issue 32, item 6, through a real shared-mode `streamlit run app.py` and the protocol client (specviz/loadtest/protocol.py),
which sends what a browser never would:

* a value for the Exactness lab's toy table that is not JSON, or JSON naming a row that is not there (before: an
  IndexError / JSONDecodeError with server paths, and the session's page stayed broken);
* one session alternating ?run=A / ?run=B under a small SPECVIZ_RUN_DIR_MAX_MB (before: a new file per rerun, which
  evicted another participant's run and the presented run).

No model for the lab; the tiny llama for the runs. No browser: the tests/browser folder is where real servers run."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from specviz.loadtest.protocol import StSession
from tests.browser.conftest import REPO, run_app

KEY = "a presenter key nobody guesses"
RUN_SETTINGS = {"prompt": "the quick brown fox jumps over the lazy dog", "drafter": "ngram", "max_new_tokens": "12"}
CAP_MB = 0.1  # about ten of the tiny model's runs: the attacker's files alone would fill it many times before


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_dir):
    root = tmp_path_factory.mktemp("attacks")
    env = {
        "SPECVIZ_MODE": "shared", "SPECVIZ_TARGETS": str(tiny_dir["llama"]), "SPECVIZ_RUN_DIR": str(root / "runs"),
        "SPECVIZ_RUN_DIR_MAX_MB": str(CAP_MB), "SPECVIZ_PRESENTER_KEY": KEY,
    }  # fmt: skip
    with run_app(root / "server.log", env=env) as handle:
        yield handle, root / "runs"


def leaks(session: StSession) -> list[str]:
    """Anything on the page that shows the server's insides: an exception element, a path of the checkout or Python."""
    texts = session.texts() + session.exceptions()
    return session.exceptions() + [t for t in texts if str(REPO) in t or "site-packages" in t or "Traceback" in t]


def run_token(session: StSession) -> str:
    return urllib.parse.parse_qs(session.query)["run"][-1]


def test_a_malformed_toy_table_resets_with_a_message_and_the_page_goes_on(server):
    handle, _ = server
    with StSession(handle.url, page="exactness") as lab:
        assert lab.metric("TV from p_target") is not None and not leaks(lab)
        lab.send_raw("lab_vocab", string_value="this is not JSON")  # kept and sent again with every later rerun
        assert not leaks(lab), leaks(lab)
        assert any("lab_vocab" in a and "reset" in a for a in lab.alerts()), lab.alerts()
        assert lab.metric("TV from p_target") is not None
        lab.send_raw("lab_vocab", string_value='{"edited_rows": {"99": {"p_target": 1}}, "added_rows": [], "deleted_rows": []}')
        assert not leaks(lab), leaks(lab)
        assert any("toy vocabulary" in a and "reset" in a for a in lab.alerts()), lab.alerts()
        lab.rerun()
        assert not leaks(lab) and lab.metric("TV from p_target") is not None
    assert "Traceback" not in handle.log() or "incident" in handle.log()  # a traceback in the log belongs to an incident


def test_alternating_two_tokens_neither_floods_the_directory_nor_evicts_others(server):
    handle, runs = server
    sessions = []
    try:
        victim = StSession(handle.url, RUN_SETTINGS)
        sessions.append(victim)
        victim.open()
        victim.click("Step")
        victim.click("Step")
        tokens = []
        for _ in range(2):  # A and B: runs the attacker can name
            other = StSession(handle.url, RUN_SETTINGS)
            sessions.append(other)
            other.open()
            other.click("Step")
            tokens.append(run_token(other))
        teacher = StSession(handle.url, RUN_SETTINGS)
        sessions.append(teacher)
        teacher.open()
        teacher.click("Step")
        teacher.set_widget("present_key", KEY)
        teacher.click("present")
        assert any("You are presenting" in a for a in teacher.alerts()), teacher.alerts()
        before = {p.stem for p in runs.glob("*.json")}
        assert {run_token(victim), run_token(teacher), *tokens} <= before
        attacker = StSession(handle.url, RUN_SETTINGS)
        sessions.append(attacker)
        attacker.open()
        for _ in range(12):
            for token in tokens:
                attacker.query = urllib.parse.urlencode(RUN_SETTINGS | {"run": token})
                attacker.rerun()
                assert not leaks(attacker), leaks(attacker)
        after = {p.stem for p in runs.glob("*.json")}
        assert {run_token(victim), run_token(teacher), *tokens} <= after  # nobody else's run was evicted
        assert len(after - before) <= 2, len(after - before)  # one fork of each token, not one per rerun
        with StSession(handle.url, {"run": run_token(victim)}) as reload:  # the victim reloads
            assert any("Restored this run at round 2" in a for a in reload.alerts()), reload.alerts()
    finally:
        for s in sessions:
            s.close()


def test_the_run_directory_stayed_within_its_cap(server):
    _, runs = server
    assert sum(p.stat().st_size for p in Path(runs).glob("*.json")) <= CAP_MB * 2**20
