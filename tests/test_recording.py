"""Recordings: a live run's views equal those of its recording replayed; bad files are clear errors; token
texts that are pieces of a character keep their bytes and join back into the character."""

from __future__ import annotations

import json
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from specviz.config import RunConfig
from specviz.recording.build import dumps
from specviz.recording.load import MAX_BYTES, load_recording
from specviz.recording.schema import RecordingError
from specviz.viz import (
    drafts_frame,
    figures,
    latency_frame,
    num_positions,
    position_frame,
    position_info,
    progress_frame,
    rounds_frame,
    stream_frame,
    token_stream_html,
)
from specviz.viz.figures import BASELINE_RUN
from specviz.viz.tokens import join_pieces, piece_text, text_bytes, visible_plain

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "the cat sat on the mat and the dog sat on the log and the cat sat on the"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def views_of(source) -> dict[str, object]:
    """Every frame and figure the step-through page draws from a session (live or replayed), as comparable values."""
    out: dict[str, object] = {}
    text = source.token_text
    base = source.baseline.records
    rounds = []
    for run in source.runs:
        recs, name = run.records, run.label
        stream = stream_frame(recs, text)
        out[f"{name}/stream"] = stream
        out[f"{name}/stream_html"] = token_stream_html(source.prompt_texts, stream)
        out[f"{name}/drafts"] = drafts_frame(recs, text)
        rounds.append(rounds_frame(recs, name, base))
        out[f"{name}/latency"] = latency_frame(recs, name)
        out[f"{name}/progress"] = progress_frame(recs, name)
        for r in recs:
            for p in range(num_positions(r)):
                frame = position_frame(r, p, text)
                out[f"{name}/{r.index}/{p}/position"] = frame
                out[f"{name}/{r.index}/{p}/inspector"] = figures.inspector_figure(frame, position_info(r, p)).to_json()
    all_rounds = pd.concat(rounds, ignore_index=True)
    out["rounds"] = all_rounds
    for fig in (figures.accepted_figure, figures.alpha_figure, figures.tokens_per_target_pass_figure, figures.speedup_figure):
        out[fig.__name__] = fig(all_rounds).to_json()
    latency = pd.concat([latency_frame(r.records, r.label) for r in source.runs] + [latency_frame(base, BASELINE_RUN)], ignore_index=True)
    progress = pd.concat([progress_frame(r.records, r.label) for r in source.runs] + [progress_frame(base, BASELINE_RUN)], ignore_index=True)
    out["latency_figure"] = figures.latency_figure(latency).to_json()
    out["progress_figure"] = figures.progress_figure(progress).to_json()
    out["baseline_error"] = source.baseline.error
    out["prompt_texts"] = list(source.prompt_texts)
    return out


def assert_same_views(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], pd.DataFrame):
            pd.testing.assert_frame_equal(a[key], b[key], check_exact=True, obj=key)
        else:
            assert a[key] == b[key], key


@pytest.fixture(scope="module")
def live(tiny_models, tiny_dir):
    """A compare-mode session on the tiny llama (early exit at T=1 beside prompt lookup), stepped like the page,
    with the views after every round, and its recording."""
    target = tiny_models["llama"]
    config = RunConfig(target=str(tiny_dir["llama"]), drafter="early-exit", exit_layer=1, temperature=1.0, num_draft_tokens=3, auto_k=False, max_new_tokens=14, chat=False, seed=3)
    return stepped_compare(target, config, replace(config, drafter="lookup"), ("A: early exit", "B: prompt lookup"))


def stepped_compare(target, config: RunConfig, compare: RunConfig, labels: tuple[str, str]):
    """Compare mode stepped like the page until done: (session, the views after every round, its recording)."""
    from specviz.models import encode_prompt, environment
    from specviz.runs import RunModels, build_decoder
    from specviz.ui.common.models import TokenTexts
    from specviz.ui.step_through.replay import session_recording
    from specviz.ui.step_through.session import Run, StepSession, step_session
    from tests.plain_baseline import Baseline

    prompt_ids = encode_prompt(target.tokenizer, PROMPT, chat=False)
    runs = [Run(label, c, build_decoder(c, RunModels(target), prompt_ids)) for label, c in zip(labels, (config, compare))]
    session = StepSession(PROMPT, config, compare, prompt_ids, TokenTexts(target.tokenizer), runs, Baseline(build_decoder(config, RunModels(target), prompt_ids, baseline=True)))
    snapshots = []
    while not session.done:
        step_session(session)
        session.baseline.advance_to(max(len(r.decoder.generated) for r in session.runs))  # the page's worker, in line
        snapshots.append(views_of(session))
    return session, snapshots, session_recording(session, environment(target))

def test_live_views_equal_the_replayed_recording_after_every_round(live):
    from specviz.ui.step_through.replay import ReplaySession

    session, snapshots, recording = live
    loaded = load_recording(dumps(recording).encode("utf-8"))
    assert loaded == recording
    fates = {f for run in session.runs for r in run.records for f in r.emitted_fates}
    assert {"accepted", "resampled"} <= fates, fates  # both paths of the rule are in the file
    for n, expected in enumerate(snapshots, start=1):
        replay = ReplaySession.open(loaded, "test", shown=n)
        assert_same_views(expected, views_of(replay))
    replay = ReplaySession.open(loaded, "test")
    replay.to_end()
    assert replay.done and all(r.done for r in replay.runs)
    replay.reset()
    assert replay.num_rounds == 0


def test_recording_holds_config_prompt_texts_stats_and_environment(live):
    session, _, recording = live
    raw = json.loads(dumps(recording))
    assert raw["format"] == "specviz-recording" and raw["version"] == 1
    assert raw["prompt"] == PROMPT and raw["prompt_ids"] == session.prompt_ids
    assert [r["config"]["drafter"] for r in raw["runs"]] == ["early-exit", "lookup"]
    env = raw["environment"]
    assert env["vocab_size"] == session.runs[0].decoder.target.vocab_size
    assert {"model", "dtype", "device", "device_name", "torch", "transformers", "created"} <= set(env)
    shown = set(session.prompt_ids) | {t for run in session.runs for r in run.records for t in (*r.drafted, *r.emitted)}
    assert shown <= {int(k) for k in raw["token_texts"]}
    for run, saved in zip(session.runs, raw["runs"]):
        assert saved["stats"]["new_tokens"] == len(run.decoder.generated)
        assert len(saved["records"]) == len(run.records)
        assert set(saved["records"][0]) >= {"drafted", "draft_fates", "emitted", "emitted_fates", "dists", "round_ms"}
    assert raw["baseline"]["records"] and all(r["drafted"] == [] for r in raw["baseline"]["records"])


# --- bad recordings -----------------------------------------------------------------------------------------


def _first_drafting(raw: dict) -> dict:
    return next(r for r in raw["runs"][0]["records"] if r["drafted"])


def _wrong_fates(raw: dict) -> None:
    rec = _first_drafting(raw)
    rec["draft_fates"] = ["rejected"] + ["accepted"] * (len(rec["drafted"]) - 1) if len(rec["drafted"]) > 1 else ["accepted", "rejected"]


def _short_fates(raw: dict) -> None:
    _first_drafting(raw)["draft_fates"].append("discarded")


def _id_outside(raw: dict) -> None:
    raw["runs"][0]["records"][0]["dists"][0]["token_ids"][0] = raw["environment"]["vocab_size"] + 5


def _missing_text(raw: dict) -> None:
    tok = raw["runs"][0]["records"][0]["emitted"][0]
    del raw["token_texts"][str(tok)]


BAD = [
    ("not JSON", lambda raw: b"\x89PNG\r\n\x1a\n not json", "not JSON"),
    ("another format", lambda raw: {**raw, "format": "chrome-trace"}, "not a specviz recording"),
    ("a JSON list", lambda raw: [1, 2], "not a specviz recording"),
    ("newer version", lambda raw: {**raw, "version": 2}, "newer than this specviz reads"),
    ("missing field", lambda raw: {k: v for k, v in raw.items() if k != "environment"}, "environment: Field required"),
    ("missing record field", lambda raw: raw["runs"][0]["records"][0].pop("emitted") and raw, "emitted"),
    ("fates against the rule", lambda raw: _wrong_fates(raw) or raw, "do not match the rule"),
    ("fates not matching the drafts", lambda raw: _short_fates(raw) or raw, "drafted tokens but"),
    ("id outside the vocabulary", lambda raw: _id_outside(raw) or raw, "outside the vocabulary"),
    ("id without a text", lambda raw: _missing_text(raw) or raw, "no entry in token_texts"),
    ("bad config", lambda raw: raw["runs"][0]["config"].update(num_draft_tokens=99) or raw, "runs.0.config: Number of draft tokens k"),
    ("over 50 MB", lambda raw: b" " * (MAX_BYTES + 1), "limited to 50 MB"),
    ("nested too deeply", lambda raw: b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
]


@pytest.mark.parametrize("name, mutate, message", BAD, ids=[b[0] for b in BAD])
def test_bad_recordings_are_clear_errors(live, name, mutate, message):
    raw = json.loads(dumps(live[2]))
    data = mutate(raw)
    if not isinstance(data, bytes):
        data = json.dumps(data).encode("utf-8")
    with pytest.raises(RecordingError) as err:
        load_recording(data)
    assert message in str(err.value), str(err.value)
    assert len(str(err.value)) < 800  # a message to read, not a dump


def html_tags(html: str) -> set[str]:
    """The element names an HTML fragment opens (to check that only our own markup survives)."""
    tags: set[str] = set()

    class Parser(HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.add(tag)

    Parser().feed(html)
    return tags


def test_html_in_token_texts_is_shown_escaped(live):
    from specviz.ui.step_through.replay import ReplaySession

    raw = json.loads(dumps(live[2]))
    tok = raw["runs"][0]["records"][0]["emitted"][0]
    raw["token_texts"][str(tok)] = HOSTILE
    raw["token_texts"][str(raw["prompt_ids"][0])] = HOSTILE
    replay = ReplaySession.open(load_recording(json.dumps(raw)), "test")
    replay.to_end()
    views = views_of(replay)
    html = views["A: early exit/stream_html"]
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert html_tags(html) <= {"div", "span", "br", "details", "summary"}  # details: the folded prompt
    assert "<script" not in views["A: early exit/0/0/inspector"] or "&lt;script" in views["A: early exit/0/0/inspector"]


# --- tokens that are pieces of a character ------------------------------------------------------------------


def _byte_level_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"])
    raw.train_from_iterator(["hello world", "the cat sat"] * 5, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>")


def _byte_fallback_tokenizer():
    from tokenizers import Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<0x{b:02X}>": b for b in range(256)} | {"▁": 256, "h": 257, "e": 258, "<unk>": 259}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>"))
    raw.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    raw.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")


@pytest.mark.parametrize("make", [_byte_level_tokenizer, _byte_fallback_tokenizer], ids=["byte-level BPE", "byte fallback"])
def test_pieces_of_a_character_show_as_bytes_and_join(make):
    from specviz.models import token_bytes
    from specviz.viz.tokens import TokenTable

    tok = make()
    text = "日本語 🚀 he"
    ids = tok(text)["input_ids"]
    table = TokenTable(lambda i: token_bytes(tok, i))
    texts = [table(i) for i in ids]
    assert "�" not in "".join(texts)
    assert any(t.startswith("⟨E6") for t in texts), texts  # 日 = E6 97 A5, split across tokens
    assert b"".join(text_bytes(t) for t in texts).decode("utf-8").strip() == text.strip()
    joined = "".join(shown for _, _, shown in join_pieces(texts))
    assert "日本語" in joined and "🚀" in joined and "⟨" not in joined


def test_stream_joins_committed_pieces_with_the_pieces_on_hover():
    pieces = [b"\xe6\x97", b"\xa5", "本".encode(), b" \xf0\x9f", b"\x9a\x80"]
    texts = [piece_text(p) for p in pieces]
    assert texts[0] == "⟨E6 97⟩" and texts[1] == "⟨A5⟩" and texts[3] == " ⟨F0 9F⟩"
    assert [text_bytes(t) for t in texts] == pieces
    stream = pd.DataFrame(
        [{"round": 0, "kind": "accepted", "token_id": i, "text": t, "p_target": 0.5, "q_draft": 0.5, "accept_prob": 1.0, "uniform": 0.1,
          "residual": float("nan"), "has_q": True, "first_in_round": i == 0} for i, t in enumerate(texts)]
    )  # fmt: skip
    html = token_stream_html([piece_text(b"\xe8"), piece_text(b"\xaa\x9e")], stream)
    assert "語" in html and "日" in html and "🚀" in html and "⟨" not in html.split("title=")[0]
    assert "2 tokens make this text together" in html and "⟨E6 97⟩" in html  # the pieces, on hover
    alone = token_stream_html([], stream.iloc[[1]])
    assert "⟨A5⟩" in alone  # a lone piece shows its bytes
    assert ">⟨F0 9F⟩<" in token_stream_html([], stream.iloc[[4, 3]].assign(text=["x", "⟨F0 9F⟩"]))  # no space marks inside
    assert visible_plain(" ⟨E6 97⟩ a") == "␣⟨E6 97⟩␣a"
    rejected = stream.assign(kind=["accepted", "rejected", "accepted", "accepted", "accepted"])
    assert "日" not in token_stream_html([], rejected)  # a thrown-away draft is never joined into committed text


@pytest.mark.smollm
def test_smollm_pieces_round_trip_through_a_recording(smollm):
    from specviz.models import token_bytes
    from specviz.viz.tokens import TokenTable

    ids = smollm.tokenizer("日本語 🚀")["input_ids"]
    table = TokenTable(lambda i: token_bytes(smollm.tokenizer, i))
    texts = [table(i) for i in ids]
    assert sum(t.count("⟨") for t in texts) >= 4, texts
    assert "".join(shown for _, _, shown in join_pieces(texts)) == "日本語 🚀"


# --- command line: generate --record, replay -----------------------------------------------------------------


def test_generate_record_then_replay_without_a_model(tmp_path, tiny_dir, capsys, monkeypatch):
    import subprocess
    import sys

    from specviz import cli

    path = tmp_path / "run.json"
    argv = ["generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", PROMPT, "--drafter", "lookup", "-k", "3",
            "--max-new-tokens", "8", "--num-samples", "2", "--temperature", "1", "--record", str(path), "--json"]  # fmt: skip
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rec = load_recording(path.read_bytes())
    assert [r.seed for r in rec.runs] == [s["seed"] for s in out["samples"]]
    assert [[t for r in run.records for t in r.emitted] for run in rec.runs] == [s["output_ids"] for s in out["samples"]]
    assert rec.baseline is not None and rec.baseline.metrics.new_tokens >= max(r.metrics.new_tokens for r in rec.runs)
    assert rec.environment.vocab_size > 0 and rec.environment.transformers

    import specviz.models
    import specviz.models.loading

    def refuse(*args, **kwargs):
        raise AssertionError("replay must not load a model")

    monkeypatch.setattr(specviz.models, "load_model", refuse)
    monkeypatch.setattr(specviz.models.loading, "load_model", refuse)
    assert cli.main(["replay", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "sample 1" in shown and "sample 2" in shown and "tokens/target pass" in shown and "baseline" in shown
    probe = f"import sys; from specviz import cli; rc = cli.main(['replay', {str(path)!r}]); print('transformers' in sys.modules, rc)"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=str(Path(__file__).parents[1]))
    assert proc.stdout.strip().splitlines()[-1] == "False 0", proc.stdout + proc.stderr


def test_replay_of_a_bad_file_is_exit_code_2(tmp_path, capsys):
    from specviz import cli

    path = tmp_path / "bad.json"
    path.write_text('{"format": "specviz-recording", "version": 7}', encoding="utf-8")
    assert cli.main(["replay", str(path)]) == 2
    assert "newer than this specviz reads" in capsys.readouterr().err
