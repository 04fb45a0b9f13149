"""Safety: no remote code unless asked, no pickle checkpoints unless asked, localhost by default, output as text."""

from __future__ import annotations

import inspect
import json
import shutil
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from specviz.config import RunConfig
from specviz.models import ModelLoadError, load_model, loading
from tests.toys import RepeatLM

REPO = Path(__file__).resolve().parents[1]


class _Captured(Exception):
    """Raised by the fake from_pretrained so load_model stops right after we saw its arguments."""


@pytest.fixture
def captured(monkeypatch) -> dict[str, dict]:
    """Patch the transformers entry points load_model uses; record the kwargs of each call."""
    calls: dict[str, dict] = {}

    def fake(name):
        def from_pretrained(source, *args, **kwargs):
            calls[name] = dict(kwargs, source=source)
            if name == "model":
                raise _Captured
            return object()

        return from_pretrained

    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", fake("tokenizer"))
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", fake("model"))
    return calls


# --- trust_remote_code: off unless the caller opts in ---------------------------------------------------------


def test_hub_id_loads_without_remote_code_by_default(captured):
    with pytest.raises(_Captured):
        load_model("some-org/some-model", "cpu", "float32")
    assert captured["model"]["trust_remote_code"] is False
    assert captured["tokenizer"]["trust_remote_code"] is False
    assert captured["model"]["local_files_only"] is True  # and no download unless asked


def test_remote_code_only_when_asked(captured):
    with pytest.raises(_Captured):
        load_model("some-org/some-model", "cpu", "float32", trust_remote_code=True)
    assert captured["model"]["trust_remote_code"] is True
    assert captured["tokenizer"]["trust_remote_code"] is True


def test_local_folder_loads_without_remote_code_and_safetensors_only(captured, tiny_dir):
    with pytest.raises(_Captured):
        load_model(str(tiny_dir["llama"]), "cpu", "float32")
    assert captured["model"]["trust_remote_code"] is False
    assert captured["model"]["use_safetensors"] is True


def test_every_entry_point_defaults_to_no_remote_code():
    from specviz.cli import build_parser

    assert RunConfig().trust_remote_code is False
    assert inspect.signature(load_model).parameters["trust_remote_code"].default is False
    assert inspect.signature(load_model).parameters["allow_pickle"].default is False
    args = build_parser().parse_args(["generate", "--prompt", "hi"])
    assert args.trust_remote_code is False


def test_streamlit_loader_defaults_to_no_remote_code():
    pytest.importorskip("streamlit")
    from specviz.ui.common.models import get_model

    assert inspect.signature(get_model).parameters["trust_remote_code"].default is False


# --- pickle checkpoints: refused unless the caller opts in -----------------------------------------------------


class _Booby:
    """Unpickling this creates a file: proof that a pickle was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _pickle_only_folder(src: Path, dst: Path, payload) -> Path:
    """A model folder whose weights exist only as pytorch_model.bin (a pickle)."""

    dst.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if (src / name).exists():
            shutil.copy(src / name, dst / name)
    torch.save(payload, dst / "pytorch_model.bin")
    return dst


def test_pickle_only_folder_is_refused_without_running_it(tiny_dir, tmp_path):
    marker = tmp_path / "pickle-ran"
    folder = _pickle_only_folder(tiny_dir["llama"], tmp_path / "pickled", {"x": _Booby(marker)})
    with pytest.raises(ModelLoadError) as err:
        load_model(str(folder), "cpu", "float32")
    message = str(err.value)
    assert "pickle" in message and "safetensors" in message and "allow" in message.lower()
    assert not marker.exists(), "the pickle checkpoint was unpickled although the load was refused"


def test_pickle_only_folder_loads_when_allowed(tiny_dir, tmp_path):
    from safetensors.torch import load_file

    state = load_file(str(tiny_dir["llama"] / "model.safetensors"))
    folder = _pickle_only_folder(tiny_dir["llama"], tmp_path / "pickled", state)
    loaded = load_model(str(folder), "cpu", "float32", allow_pickle=True)
    name = next(iter(state))
    assert loaded.model.state_dict()[name].equal(state[name])


def test_folder_with_safetensors_and_pickle_prefers_safetensors(tiny_dir, tmp_path):
    marker = tmp_path / "pickle-ran"
    folder = tmp_path / "both"
    shutil.copytree(tiny_dir["llama"], folder)

    torch.save({"x": _Booby(marker)}, folder / "pytorch_model.bin")
    loaded = load_model(str(folder), "cpu", "float32")
    assert loaded.model.config.num_hidden_layers == json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    assert not marker.exists()


# --- the server binds to this machine only ---------------------------------------------------------------------


def test_streamlit_config_binds_to_localhost():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] in ("localhost", "127.0.0.1")
    assert config.get("browser", {}).get("gatherUsageStats") is False


def test_readme_says_how_to_open_it_to_a_workshop():
    readme = (REPO / "README.md").read_text()
    assert "--server.address 0.0.0.0" in readme


# --- model output is drawn as text, never as HTML --------------------------------------------------------------

PAYLOADS = ("<script>alert(1)</script>", '<img src=x onerror=alert(1)>', '" onmouseover="alert(1)', "&amp;<b>bold</b>")


class _TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.handlers: list[str] = []
        self.text: list[str] = []
        self.titles: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.handlers += [name for name, _ in attrs if name.startswith("on")]
        self.titles += [value for name, value in attrs if name == "title" and value]

    def handle_data(self, data):
        self.text.append(data)


def _parse(markup: str) -> _TagCollector:
    parser = _TagCollector()
    parser.feed(markup)
    parser.close()
    return parser


def test_visible_html_escapes_tags():
    from specviz.viz import visible_html

    for payload in PAYLOADS:
        out = visible_html(payload)
        assert "<script" not in out and "<img" not in out and "<b>" not in out
        assert _parse(out).tags <= {"span", "br"}


def test_token_stream_renders_model_output_as_text():
    """Prompt, drafted, rejected and emitted tokens whose text is HTML: the markup has only our own tags, no
    event handlers, and the payloads come back as literal text (and as literal text in the hover titles)."""
    from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
    from specviz.drafters import PromptLookupDrafter
    from specviz.viz import stream_frame, token_stream_html

    decoder = SpeculativeDecoder(RepeatLM(len(PAYLOADS)), PromptLookupDrafter(), [0, 1, 2, 3, 0, 1], DecodeConfig(num_draft_tokens=3, max_new_tokens=12))
    decoder.run()
    text_of = lambda i: PAYLOADS[i]  # noqa: E731
    stream = stream_frame(decoder.records, text_of)
    assert len(stream) >= 12
    markup = token_stream_html([text_of(i) for i in decoder.tokens[: decoder.prompt_length]], stream)
    parsed = _parse(markup)
    assert parsed.tags <= {"div", "span", "br"}
    assert parsed.handlers == []
    shown = "".join(parsed.text).replace("␣", " ")
    for payload in PAYLOADS:
        assert payload in shown
    assert any("<script>" in title for title in parsed.titles)  # the hover text keeps the literal token
    folded = _parse(token_stream_html([text_of(i) for i in decoder.tokens[: decoder.prompt_length]], stream, prompt_summary=" ".join(PAYLOADS)))
    assert folded.tags <= {"div", "span", "br", "details", "summary"} and folded.handlers == []  # the prompt's one line is text too
    assert all(payload.split()[0] in "".join(folded.text) for payload in PAYLOADS if payload.split())
