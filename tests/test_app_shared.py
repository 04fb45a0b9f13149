"""Shared mode in the app (AppTest): participants see only what the owner allowed, anything forced through session
state or the URL is refused with an error and the safe default is used, limits are enforced with a message, and a
session waiting for the model is told so. The target is the tiny local llama, put on the owner's list by env var."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.config import EMBEDDED_TARGET
from specviz.workshop.queues import model_queue, reset_queues

PAGES = Path(__file__).resolve().parents[1] / "pages"
STATE = "specviz_step_through"
PROMPT = "the quick brown fox jumps over the lazy dog the quick brown fox"
RISKY_CHECKBOXES = {"trust_remote_code", "allow_pickle", "allow_download"}
OWNER_ENV = [k for k in (
    "SPECVIZ_MODE", "SPECVIZ_ALLOW_REMOTE_CODE", "SPECVIZ_ALLOW_PICKLE", "SPECVIZ_ALLOW_DOWNLOAD", "SPECVIZ_ALLOW_CUSTOM_MODELS",
    "SPECVIZ_ALLOW_DEVICE", "SPECVIZ_TARGETS", "SPECVIZ_DRAFTS", "SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_DRAFT_TOKENS",
    "SPECVIZ_MAX_SAMPLES", "SPECVIZ_MAX_RUNS", "SPECVIZ_MAX_CONCURRENT", "SPECVIZ_QUEUE_TIMEOUT_S",
)]  # fmt: skip


@pytest.fixture()
def shared(monkeypatch, tiny_dir):
    """Shared mode with the tiny llama as the only target; returns its path."""
    for key in OWNER_ENV:
        monkeypatch.delenv(key, raising=False)
    target = str(tiny_dir["llama"])
    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    monkeypatch.setenv("SPECVIZ_TARGETS", target)
    reset_queues()
    yield target
    reset_queues()


def step_page(**state) -> AppTest:
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    for key, value in {"prompt": PROMPT, "drafter": "lookup", **state}.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def keys(at: AppTest, kind: str) -> set[str]:
    return {w.key for w in getattr(at, kind)}


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def config(at: AppTest):
    return at.session_state[STATE].session.config


def test_risky_options_are_absent_in_shared_mode(shared):
    at = step_page()
    assert not keys(at, "text_input") & {"target", "draft_model"}, "no free-text model paths"
    assert not keys(at, "checkbox") & RISKY_CHECKBOXES
    assert not keys(at, "selectbox") & {"device", "dtype", "model_pair"}
    target = next(w for w in at.selectbox if w.key == "target")
    assert list(target.options) == [shared]
    assert "draft model (a smaller LM)" not in next(w for w in at.selectbox if w.key == "drafter").options  # no draft models on the list
    assert any("Shared server" in c.value for c in at.sidebar.caption)
    assert not errors(at)


def test_the_default_list_is_the_embedded_model_only(monkeypatch, tiny_models):
    for key in OWNER_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    import specviz.ui.common.models as ui_models

    monkeypatch.setattr(ui_models, "get_model", lambda *a, **k: tiny_models["llama"])  # no SmolLM2 load here
    at = step_page()
    assert list(next(w for w in at.selectbox if w.key == "target").options) == [EMBEDDED_TARGET]


def test_forced_session_state_is_refused_and_the_safe_default_used(shared):
    at = step_page(
        target="/etc/passwd", draft_model="/root/.ssh/id_rsa", trust_remote_code=True, allow_pickle=True, allow_download=True,
        device="cuda", dtype="float16", drafter="model",
    )
    shown = " ".join(errors(at))
    for words in ("/etc/passwd", "id_rsa", "trust remote code", "allow pickle checkpoints", "allow downloads", "device", "dtype", "'model'"):
        assert words in shown, (words, shown)
    click(at, "step")
    c = config(at)
    assert c.target == shared and c.draft is None and c.drafter == "ngram"
    assert not (c.trust_remote_code or c.allow_pickle or c.allow_download)
    assert (c.device, c.dtype) == ("auto", "auto")
    assert at.session_state[STATE].session.runs[0].records, "the run goes on with the safe settings"


def test_forced_mid_session_before_a_rerun_is_refused(shared):
    at = step_page()
    click(at, "step")
    at.session_state["trust_remote_code"] = True  # keys of widgets a participant never sees
    at.session_state["allow_pickle"] = True
    at.session_state["device"] = "cuda"
    click(at, "reset")
    assert any("trust remote code" in e for e in errors(at)) and any("pickle" in e for e in errors(at)) and any("cuda" in e for e in errors(at))
    click(at, "step")
    c = config(at)
    assert c.target == shared and not (c.trust_remote_code or c.allow_pickle) and c.device == "auto"


def test_forced_through_the_url_is_refused(shared, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "128")  # the tiny target's context is 256 tokens
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    for key, value in {"target": "/etc/passwd", "trust_remote_code": "true", "allow_pickle": "1", "num_draft_tokens": "16", "max_new_tokens": "2048"}.items():
        at.query_params[key] = value
    at.session_state["prompt"] = PROMPT
    at.run()
    assert not at.exception
    click(at, "step")
    c = config(at)
    assert c.target == shared and not (c.trust_remote_code or c.allow_pickle)
    assert c.num_draft_tokens <= 8 and c.max_new_tokens <= 128


def test_owner_allowed_options_appear(shared, monkeypatch, tiny_dir):
    monkeypatch.setenv("SPECVIZ_ALLOW_REMOTE_CODE", "1")
    monkeypatch.setenv("SPECVIZ_TARGETS", f"{shared},{tiny_dir['gpt2']}")
    monkeypatch.setenv("SPECVIZ_DRAFTS", str(tiny_dir["llama_draft"]))
    at = step_page()
    assert keys(at, "checkbox") & RISKY_CHECKBOXES == {"trust_remote_code"}
    assert list(next(w for w in at.selectbox if w.key == "target").options) == [shared, str(tiny_dir["gpt2"])]
    assert list(next(w for w in at.selectbox if w.key == "draft_model").options) == ["none", str(tiny_dir["llama_draft"])]
    assert "draft model (a smaller LM)" in next(w for w in at.selectbox if w.key == "drafter").options
    next(w for w in at.selectbox if w.key == "draft_model").set_value(str(tiny_dir["llama_draft"]))
    next(w for w in at.selectbox if w.key == "drafter").set_value("model")
    at.run()
    click(at, "step")
    assert not errors(at), errors(at)
    assert config(at).draft == str(tiny_dir["llama_draft"]) and config(at).drafter == "model"


def test_limits_are_enforced_with_a_message(shared, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "5")
    monkeypatch.setenv("SPECVIZ_MAX_DRAFT_TOKENS", "3")
    at = step_page(max_new_tokens=2048, num_draft_tokens=16)
    assert any("max new tokens is limited to 5" in e for e in errors(at)), errors(at)
    assert any("k is limited to 3" in e for e in errors(at)), errors(at)
    assert next(w for w in at.number_input if w.key == "max_new_tokens").max == 5
    ceiling = next(w for w in at.slider if w.key == "max_draft_tokens")  # k: auto: k's slider is auto's ceiling
    assert (ceiling.max, ceiling.value) == (3, 3)
    click(at, "run_all")
    c = config(at)
    assert (c.max_new_tokens, c.num_draft_tokens, c.max_draft_tokens) == (5, 3, 3)
    at.toggle(key="auto_k").set_value(False).run()
    assert next(w for w in at.slider if w.key == "num_draft_tokens").max == 3
    assert len(at.session_state[STATE].session.runs[0].decoder.generated) <= 5


def test_a_public_address_means_shared_mode(monkeypatch, tiny_dir):
    from streamlit import config as st_config

    for key in OWNER_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SPECVIZ_TARGETS", str(tiny_dir["llama"]))
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    try:
        at = step_page(trust_remote_code=True)
        assert not keys(at, "checkbox") & RISKY_CHECKBOXES and any("trust remote code" in e for e in errors(at))
        monkeypatch.setenv("SPECVIZ_MODE", "local")  # the owner says otherwise
        at = step_page()
        assert RISKY_CHECKBOXES <= keys(at, "checkbox") and {"target", "draft_model"} <= keys(at, "text_input")
    finally:
        st_config.set_option("server.address", before)


def test_a_bad_owner_setting_is_shown_and_the_strict_rules_apply(shared, monkeypatch):
    monkeypatch.setenv("SPECVIZ_ALLOW_PICKLE", "perhaps")
    at = step_page()
    assert any("SPECVIZ_ALLOW_PICKLE" in e for e in errors(at))
    assert not keys(at, "checkbox") & RISKY_CHECKBOXES


def test_a_waiting_session_is_told_and_gives_up_with_a_message(shared, monkeypatch, tiny_models):
    monkeypatch.setenv("SPECVIZ_QUEUE_TIMEOUT_S", "1")
    at = step_page()
    click(at, "step")
    session = at.session_state[STATE].session
    queue = model_queue((session.target.name, str(session.target.device), str(session.target.dtype)), 1)
    entered, release = threading.Event(), threading.Event()

    def other_participant():
        with queue.turn():
            entered.set()
            release.wait(30)

    t = threading.Thread(target=other_participant)
    t.start()
    entered.wait(5)
    try:
        click(at, "step")
        assert any("Waited 1 s for the model (1 ahead)" in w.value for w in at.warning), [w.value for w in at.warning]
        assert len(session.runs[0].records) == 1, "nothing ran while waiting"
        click(at, "run_all")  # Run to end stops on the timeout instead of spinning
        assert len(session.runs[0].records) == 1
    finally:
        release.set()
        t.join(5)
    click(at, "step")
    assert len(session.runs[0].records) == 2 and not at.warning


def test_the_model_cache_refuses_models_off_the_list(shared, monkeypatch):
    import specviz.ui.common.models as ui_models
    from specviz.models import ModelLoadError

    loads = []
    monkeypatch.setattr(ui_models, "_cached_model", lambda *key: loads.append(key))
    at = AppTest.from_string(
        "import streamlit as st\nfrom specviz.ui.common.models import get_model\n"
        "try:\n    get_model('/etc', trust_remote_code=True)\nexcept ValueError as exc:\n    st.error(str(exc))\n"
    )
    at.run()
    assert any("not on this server's list" in e for e in errors(at)) and loads == []
    assert issubclass(ModelLoadError, ValueError)


def test_lab_and_benchmark_pages_hide_paths_and_cap_samples(shared, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_SAMPLES", "1000")
    at = AppTest.from_file(str(PAGES / "exactness.py"), default_timeout=120)
    at.session_state["lab_num_samples"] = 1_000_000
    at.session_state["lab_real_target"] = "/etc/passwd"
    at.run()
    assert not at.exception
    assert not keys(at, "text_input") & {"lab_real_target", "lab_greedy_target"}
    assert not keys(at, "selectbox") & {"lab_real_device", "lab_greedy_device"}
    assert any("samples N is limited to 1,000" in e for e in errors(at)) and any("/etc/passwd" in e for e in errors(at))
    assert at.session_state["lab_num_samples"] == 1000

    at = AppTest.from_file(str(PAGES / "benchmark.py"), default_timeout=120)
    at.session_state["bench_max_new_tokens"] = 1000
    at.run()
    assert not at.exception
    assert not keys(at, "text_input") & {"bench_target", "bench_draft"} and "bench_device" not in keys(at, "selectbox")
    assert any("max new tokens is limited to 128" in e for e in errors(at)), errors(at)
