"""Issue 32, item 4, on a real server: `streamlit run app.py` in shared mode with the embedded model, a small token
budget and a KV-cache budget of exactly ten sessions' worst case. Ten protocol sessions (specviz/loadtest/protocol.py) with
prompts at the token budget each Step once and stay open: every one runs, the budget is never passed, and the
server's memory grows by less than the budget plus a per-session allowance. The eleventh participant gets the
message, not an out-of-memory kill, and runs as soon as one of the ten presses Reset. A client address over the
owner's cap of sessions gets the message too. No browser."""

from __future__ import annotations

import psutil
import pytest

from specviz.loadtest.protocol import StSession
from specviz.workshop.policy import Policy
from tests.browser.conftest import run_app

pytestmark = pytest.mark.smollm

PROMPT_TOKENS = 96  # SPECVIZ_MAX_PROMPT_TOKENS here: small, so ten prefills stay cheap
MAX_NEW, K = 8, 4
SESSIONS = 10
CEILING = Policy().max_draft_tokens  # k: auto (the default; this link leaves it on) reserves room for the most a round may draft: the owner's k cap
PER_SESSION = (PROMPT_TOKENS + MAX_NEW + CEILING + 1) + (PROMPT_TOKENS + MAX_NEW + 1)  # the run and its baseline (lookup: no draft cache)
KV_BYTES = 46_080  # the embedded SmolLM2-135M in float32 (tests/test_budgets.py checks it)
ALLOWANCE_MB = 10  # a session's own objects besides its KV cache (state, records, frames); ten grew the server < 30 MB here
PER_ADDRESS = 2  # SPECVIZ_MAX_SESSIONS_PER_CLIENT here
FORWARDED = {"X-Forwarded-For": "203.0.113.7"}  # as the room's balancer would say (a proxy on loopback is trusted)


def prompt_at_the_budget(tokenizer) -> str:
    """A prompt whose ids, chat template included, are exactly PROMPT_TOKENS."""
    from specviz.models import encode_prompt

    words: list[str] = []
    while len(encode_prompt(tokenizer, " ".join(words) or "one", True)) < PROMPT_TOKENS:
        words.append(("one", "two", "three", "four")[len(words) % 4])
    text = " ".join(words)
    assert len(encode_prompt(tokenizer, text, True)) == PROMPT_TOKENS, "one word is one token: the count lands on the budget"
    return text


def server_process(url: str) -> psutil.Process:
    port = int(url.rsplit(":", 1)[1])
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            return psutil.Process(conn.pid)
    raise AssertionError(f"no process listens on port {port}")


def rss_mb(process: psutil.Process) -> float:
    return process.memory_info().rss / 2**20


def test_ten_sessions_at_the_budget_stay_within_it_and_the_eleventh_gets_the_message(tmp_path, smollm):
    env = {
        "SPECVIZ_MODE": "shared", "SPECVIZ_MAX_PROMPT_TOKENS": str(PROMPT_TOKENS), "SPECVIZ_MAX_KV_TOKENS": str(SESSIONS * PER_SESSION),
        "SPECVIZ_RUN_DIR": str(tmp_path / "runs"), "SPECVIZ_MAX_SESSIONS_PER_CLIENT": str(PER_ADDRESS),
    }  # fmt: skip
    prompt = prompt_at_the_budget(smollm.tokenizer)
    query = {"drafter": "lookup", "num_draft_tokens": str(K), "max_new_tokens": str(MAX_NEW), "prompt": prompt}
    with run_app(tmp_path / "server.log", env=env) as server:
        process = server_process(server.url)
        with StSession(server.url, query) as warm:  # the model loads and one run comes and goes
            warm.click("Step")
            assert warm.metric("rounds") == "1", warm.alerts()
            warm.click("Reset")
        before = rss_mb(process)
        sessions = []
        try:
            for i in range(SESSIONS):
                session = StSession(server.url, query)
                session.open()
                sessions.append(session)
                session.click("Step")
                assert session.metric("rounds") == "1" and not session.exceptions(), (i, session.alerts())
            after = rss_mb(process)
            budget_mb = SESSIONS * PER_SESSION * KV_BYTES / 2**20
            assert after - before <= budget_mb + SESSIONS * ALLOWANCE_MB, (before, after, budget_mb)

            with StSession(server.url, query) as late:
                late.click("Step")
                assert any("memory for runs is full" in a and f"needs {PER_SESSION} tokens of KV cache and 0 of its" in a for a in late.alerts()), late.alerts()
                assert late.metric("rounds") is None and not late.exceptions()
                assert process.is_running() and server.url  # no out-of-memory kill: the server answers
                sessions[0].click("Reset")  # one of the ten gives its share back
                late.click("Step")
                assert late.metric("rounds") == "1", late.alerts()
            one_address(server.url, query)
        finally:
            for session in sessions:
                session.close()
    assert "Traceback" not in server.log()


def one_address(url: str, query: dict[str, str]) -> None:
    """Sessions of one client address beyond the cap see the message (the ten above are this machine's owner, never
    capped); once one of them closes, a new one is served again."""
    import time

    first, second = StSession(url, query, headers=FORWARDED), StSession(url, query, headers=FORWARDED)
    first.open(), second.open()
    try:
        assert first.widget("prompt") and second.widget("prompt")
        with StSession(url, query, headers=FORWARDED) as third:
            assert any(f"already has {PER_ADDRESS} sessions open" in a for a in third.alerts()), third.alerts()
            assert not third.exceptions() and not [n for n in third.nodes.values() if n.kind == "text_area"]  # nothing else of the page
        first.close()
        deadline = time.monotonic() + 60  # the sweeper notices a closed session within a few seconds
        while True:
            with StSession(url, query, headers=FORWARDED) as again:
                if not any("sessions open" in a for a in again.alerts()):
                    assert again.widget("prompt")
                    break
            assert time.monotonic() < deadline, "a closed session kept counting against its address"
            time.sleep(2)
    finally:
        first.close(), second.close()
