"""Bad input: each case raises ValueError / ModelLoadError with text a user can act on (engine level), and the
step-through page shows it with st.error, never a traceback, without losing the rounds a session already has
(AppTest level, on tiny local models so each case takes a fraction of a second)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch

from specviz.config import MAX_PROMPT_CHARS, RunConfig, validate_prompt
from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.models import ModelLoadError, check_same_tokenizer, encode_prompt, load_model, loading
from specviz.runs import RunModels, build_decoder

# --- prompt ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_prompt(text):
    with pytest.raises(ValueError, match="empty.*type some text"):
        validate_prompt(text)


def test_empty_prompt_at_the_tokenizer_and_decoder(tiny_models):
    target = tiny_models["llama"]
    with pytest.raises(ValueError, match="empty"):
        encode_prompt(target.tokenizer, "  ")
    with pytest.raises(ValueError, match="empty"):
        build_decoder(RunConfig(target="x"), RunModels(target), [])


def test_very_long_prompt():
    assert validate_prompt("a" * MAX_PROMPT_CHARS) == "a" * MAX_PROMPT_CHARS
    with pytest.raises(ValueError, match=f"limit is {MAX_PROMPT_CHARS:,}.*Shorten"):
        validate_prompt("a" * (MAX_PROMPT_CHARS + 1))


# --- run settings ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, -1, MAX_DRAFT_TOKENS + 1, 100])
def test_num_draft_tokens_out_of_range(k):
    with pytest.raises(ValueError, match=f"between 1 and {MAX_DRAFT_TOKENS}; got {k}"):
        RunConfig(num_draft_tokens=k)


def test_num_draft_tokens_limits_are_accepted():
    assert RunConfig(num_draft_tokens=1).num_draft_tokens == 1
    assert RunConfig(num_draft_tokens=MAX_DRAFT_TOKENS).num_draft_tokens == MAX_DRAFT_TOKENS


@pytest.mark.parametrize("temperature", [-0.1, -1.0, float("-inf")])
def test_negative_temperature(temperature):
    with pytest.raises(ValueError, match="[Tt]emperature"):
        RunConfig(temperature=temperature)


def test_too_high_temperature():
    with pytest.raises(ValueError, match="between 0 and 2"):
        RunConfig(temperature=2.5)


@pytest.mark.parametrize("top_p", [0.0, -0.5, 1.0001, 2.0, float("nan")])
def test_top_p_outside_zero_one(top_p):
    with pytest.raises(ValueError, match="top.p"):
        RunConfig(top_p=top_p)


@pytest.mark.parametrize("top_p", [1e-6, 0.5, 1.0])
def test_top_p_inside_zero_one(top_p):
    assert RunConfig(top_p=top_p).top_p == top_p


def test_model_drafter_without_a_draft():
    with pytest.raises(ValueError, match="needs a draft model"):
        RunConfig(drafter="model", draft="  ")


# --- models ----------------------------------------------------------------------------------------------------


def test_unknown_model_id_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPECVIZ_ALLOW_DOWNLOAD", raising=False)
    with pytest.raises(ModelLoadError) as err:
        load_model("no-such-org/no-such-model", "cpu", "float32")
    message = str(err.value)
    assert "no-such-org/no-such-model" in message
    assert "not in the Hugging Face cache" in message and "allow downloads" in message


def test_unknown_model_id_offline_with_downloads_allowed(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="no-such-org/no-such-model"):
        load_model("no-such-org/no-such-model", "cpu", "float32", allow_download=True)


def test_draft_with_a_different_tokenizer(tiny_models):
    target, other = tiny_models["llama"], tiny_models["other_tok"]
    with pytest.raises(ModelLoadError, match="different tokenizer.*same model family"):
        check_same_tokenizer(target, other)
    prompt = encode_prompt(target.tokenizer, "the quick brown fox", chat=False)
    with pytest.raises(ModelLoadError, match="different tokenizer"):
        build_decoder(RunConfig(target="t", drafter="model", draft="d"), RunModels(target, other), prompt)
    check_same_tokenizer(target, tiny_models["llama_draft"])  # the same tokenizer passes


def test_path_that_does_not_exist(tmp_path):
    with pytest.raises(ModelLoadError, match="No model folder or file"):
        load_model(str(tmp_path / "missing"), "cpu", "float32")


def test_folder_that_is_not_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelLoadError, match="not a model folder.*config.json"):
        load_model(str(tmp_path), "cpu", "float32")


def test_folder_with_config_but_no_weights(tiny_dir, tmp_path):
    (tmp_path / "config.json").write_text((tiny_dir["llama"] / "config.json").read_text())
    with pytest.raises(ModelLoadError, match="no weights"):
        load_model(str(tmp_path), "cpu", "float32")


def test_file_that_is_not_a_model(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a model")
    with pytest.raises(ModelLoadError, match="notes.txt"):
        load_model(str(path), "cpu", "float32")


def test_missing_gguf_file(tmp_path):
    with pytest.raises(ModelLoadError, match="No GGUF file"):
        load_model(str(tmp_path / "model.gguf"), "cpu", "float32")


@pytest.mark.parametrize("num_bytes", [0, 8, 4096, 1_000_000])
def test_truncated_gguf(tmp_path, monkeypatch, num_bytes):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    source = loading.embedded_gguf_path()
    with source.open("rb") as f:
        head = f.read(num_bytes)
    path = tmp_path / "truncated.gguf"
    path.write_bytes(head)
    with pytest.raises(ModelLoadError, match="truncated.*re-download"):
        load_model(str(path), "cpu", "float32")
    assert not any((tmp_path / "cache").glob("truncated*")), "a failed load must not leave a cache entry"


def test_text_file_named_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "fake.gguf"
    path.write_text("this is not a gguf file\n" * 100)
    with pytest.raises(ModelLoadError, match="Could not read the GGUF file"):
        load_model(str(path), "cpu", "float32")


def test_unavailable_device():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ModelLoadError, match="no CUDA GPU.*'cpu'"):
        load_model("x", "cuda", "float32")
    with pytest.raises(ModelLoadError, match="Unknown device"):
        load_model("x", "tpu", "float32")
    with pytest.raises(ModelLoadError, match="Unknown dtype"):
        load_model("x", "cpu", "float17")


# --- out of memory while loading -------------------------------------------------------------------------------


def _raise_oom(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def test_out_of_memory_loading_a_folder(tiny_dir, monkeypatch):
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", _raise_oom)
    with pytest.raises(ModelLoadError, match="Out of memory.*smaller model"):
        load_model(str(tiny_dir["llama"]), "cpu", "float32")


@pytest.mark.smollm  # reads the embedded GGUF (the model load itself is patched)
def test_out_of_memory_loading_a_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", lambda *a, **k: object())  # skip a 14 s conversion
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", _raise_oom)
    with pytest.raises(ModelLoadError, match="Out of memory.*smaller model"):
        load_model(loading.EMBEDDED_TARGET, "cpu", "float32")


@pytest.mark.smollm  # reads the embedded GGUF (the model load itself is patched)
def test_out_of_memory_with_a_cached_gguf_keeps_the_cache(tmp_path, monkeypatch):
    """Running out of memory is not a damaged cache: the de-quantised copy must survive for the next try."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(cache))
    path = loading.embedded_gguf_path()
    stat = path.stat()
    entry = cache / f"{path.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    (entry / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", lambda *a, **k: object())
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", _raise_oom)
    with pytest.raises(ModelLoadError, match="Out of memory"):
        load_model(loading.EMBEDDED_TARGET, "cpu", "float32")
    assert entry.is_dir()


@pytest.mark.smollm  # reads the embedded GGUF's name and size (the model load itself is patched)
def test_the_log_says_whether_a_gguf_was_de_quantised_or_read_from_its_float_cache(tmp_path, monkeypatch, caplog):
    """The container test reads this line in the server's log: a start on the image's float cache de-quantises nothing."""

    class Model:  # a stand-in for the de-quantised model (writing the cache fails on it: a warning, not an error)
        def to(self, dtype):
            return self

    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECVIZ_CACHE_DIR", str(cache))
    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", lambda *a, **k: object())
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: Model())
    monkeypatch.setattr(loading.log, "handlers", [caplog.handler])  # the server routes it through streamlit's handler
    caplog.set_level(logging.INFO, logger=loading.log.name)
    path = loading.embedded_gguf_path()
    loading._load_gguf(path, torch.float32)
    assert "de-quantising to float32" in caplog.text and "from the cache" not in caplog.text
    caplog.clear()
    stat = path.stat()
    entry = cache / f"{path.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")
    (entry / "model.safetensors").write_bytes(b"")
    loading._load_gguf(path, torch.float32)
    assert f"float weights from the cache {entry}" in caplog.text and "de-quantising" not in caplog.text


def test_out_of_memory_moving_to_the_device(tiny_dir, monkeypatch):
    def to(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch.nn.Module, "to", to)
    with pytest.raises(ModelLoadError, match="Out of memory moving"):
        load_model(str(tiny_dir["llama"]), "cpu", "float32")


# --- the step-through page: st.error, not a traceback; earlier rounds kept ------------------------------------

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "step_through.py")
STATE = "specviz_step_through"
TINY_PROMPT = "the quick brown fox jumps over the lazy dog the quick brown fox"


def _widget(at, key: str):
    for kind in ("text_area", "selectbox", "slider", "number_input", "text_input", "toggle", "checkbox"):
        found = [w for w in getattr(at, kind) if w.key == key]
        if found:
            return found[0]
    raise KeyError(key)


def _page(tiny_dir, **widgets):
    """The step-through page on the tiny local llama (lookup drafter), then the given widget values on top.
    Values go in through session state before the first run, so the embedded model is never loaded here."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(PAGE, default_timeout=60)
    for key, value in {"target": str(tiny_dir["llama"]), "prompt": TINY_PROMPT, "drafter": "lookup", "max_new_tokens": 16, **widgets}.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def _click(at, key: str):
    at.button(key=key).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _rounds(at) -> int:
    session = at.session_state[STATE].session
    return 0 if session is None else session.num_rounds


def _errors(at) -> list[str]:
    return [e.value for e in at.error]


def _truncated_gguf(folder: Path) -> Path:
    with loading.embedded_gguf_path().open("rb") as f:
        head = f.read(4096)
    path = folder / "truncated.gguf"
    path.write_bytes(head)
    return path


# (case id, widgets on top of a valid tiny-model page, text the error must contain)
BAD_INPUTS = [
    ("empty prompt", lambda d, tmp: {"prompt": "  "}, "prompt is empty"),
    ("very long prompt", lambda d, tmp: {"prompt": "fox " * (MAX_PROMPT_CHARS // 4 + 1)}, "Shorten it"),
    ("unknown model id offline", lambda d, tmp: {"target": "no-such-org/no-such-model"}, "not in the Hugging Face cache"),
    ("draft with another tokenizer", lambda d, tmp: {"drafter": "model", "draft_model": str(d["other_tok"])}, "different tokenizer"),
    ("model drafter without a draft", lambda d, tmp: {"drafter": "model", "draft_model": ""}, "needs a draft model"),
    ("path that is not a model", lambda d, tmp: {"target": str(tmp)}, "not a model folder"),
    ("missing path", lambda d, tmp: {"target": str(tmp / "nowhere")}, "No model folder or file"),
    ("truncated GGUF", lambda d, tmp: {"target": str(_truncated_gguf(tmp))}, "truncated"),
]


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPECVIZ_ALLOW_DOWNLOAD", raising=False)


@pytest.mark.parametrize("case, widgets, message", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_page_shows_bad_input_as_an_error(case, widgets, message, tiny_dir, tmp_path, offline):
    (tmp_path / "notes.txt").write_text("not a model")
    at = _page(tiny_dir, **widgets(tiny_dir, tmp_path))
    _click(at, "step")
    assert any(message in e for e in _errors(at)), (case, _errors(at))
    assert _rounds(at) == 0


def test_page_shows_out_of_memory_while_loading(tiny_dir, tmp_path, offline, monkeypatch):
    fresh = tmp_path / "fresh-copy"  # a path the process-wide model cache has not seen
    shutil.copytree(tiny_dir["llama"], fresh)
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", _raise_oom)
    at = _page(tiny_dir, target=str(fresh))
    _click(at, "step")
    assert any("Out of memory" in e and "smaller model" in e for e in _errors(at)), _errors(at)
    assert _rounds(at) == 0


@pytest.mark.parametrize("case, widgets, message", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_mid_run_keeps_the_earlier_rounds(case, widgets, message, tiny_dir, tmp_path, offline):
    """Two good rounds, then bad input: no traceback, the two rounds stay on the page, and a message says
    what happened; Step still continues the kept run."""
    at = _page(tiny_dir)
    _click(at, "step")
    _click(at, "step")
    assert _rounds(at) == 2
    shown_before = [h.value for h in at.html if "specviz-stream" in h.value]
    for key, value in widgets(tiny_dir, tmp_path).items():
        _widget(at, key).set_value(value)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert _rounds(at) == 2
    assert [h.value for h in at.html if "specviz-stream" in h.value] == shown_before
    messages = _errors(at) + [w.value for w in at.warning]
    assert any(message in m or "settings changed" in m for m in messages), (case, messages)
    _click(at, "step")
    assert _rounds(at) == 3


def test_sidebar_cannot_produce_out_of_range_settings(tiny_dir):
    """k, temperature and top-p come from sliders bounded to what RunConfig accepts; values outside are
    not passed on (streamlit keeps the slider in range), so the page never builds an invalid run."""
    at = _page(tiny_dir, auto_k=False)  # k fixed: k's slider is k (under k: auto it is auto's ceiling)
    k, temperature, top_p = (_widget(at, key) for key in ("num_draft_tokens", "temperature", "top_p"))
    assert (k.min, k.max) == (1, MAX_DRAFT_TOKENS)
    assert temperature.min == 0.0
    assert 0.0 < top_p.min and top_p.max == 1.0
    for key, value in [("num_draft_tokens", 0), ("num_draft_tokens", MAX_DRAFT_TOKENS + 1), ("temperature", -0.5), ("top_p", 0.0), ("top_p", 1.5)]:
        at.session_state[key] = value
        at.run()
        assert not at.exception, (key, value, [e.value for e in at.exception])
        _click(at, "step")
        config = at.session_state[STATE].session.config
        assert 1 <= config.num_draft_tokens <= MAX_DRAFT_TOKENS and config.temperature >= 0 and 0 < config.top_p <= 1
        _click(at, "reset")


def test_settings_the_engine_refuses_show_an_error(tiny_dir, monkeypatch):
    """If a slider ever allows more than the engine does (here: the table's widget range for k up to 32, wider than
    validate's), RunConfig's message is an st.error."""
    import dataclasses

    from specviz import config as config_module
    from specviz.ui.step_through import caps, sidebar
    from specviz.workshop import policy

    wide = dataclasses.replace(config_module.field_named("num_draft_tokens"), ui_high=32)
    monkeypatch.setitem(config_module._BY_NAME, "num_draft_tokens", wide)
    for module in (sidebar, caps):  # the widgets, and the check of forced values before them
        monkeypatch.setattr(module, "FIELDS", tuple(wide if s.name == wide.name else s for s in module.FIELDS))
    # the owner's limit on this laptop: the engine's, patched alike
    monkeypatch.setattr(policy, "LIMIT_RANGES", tuple((n, lo, 32 if n == "max_draft_tokens" else hi) for n, lo, hi in policy.LIMIT_RANGES))
    at = _page(tiny_dir, num_draft_tokens=20)
    _click(at, "step")
    assert any(f"between 1 and {MAX_DRAFT_TOKENS}; got 20" in e for e in _errors(at)), _errors(at)
    assert _rounds(at) == 0
