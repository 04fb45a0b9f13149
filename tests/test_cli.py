"""python -m specviz generate: the JSON contract, --baseline equality, --num-samples, and errors as exit code 2.

The contract is checked on a tiny local model (fast, always run) and on the embedded SmolLM2 in a
subprocess exactly as the README shows it (marked smollm)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specviz import cli
from specviz.cli import generate, replay
from specviz.cli.options import check_output_file
from specviz.cli.terminal import EscapingFormatter, terminal_text
from specviz.config import RunConfig

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
STEP_KEYS = {"drafted", "num_accepted", "fates", "emitted", "draft_ms", "verify_ms", "round_ms", "record_ms"}
STATS_KEYS = {"target_passes", "tokens_per_target_pass", "acceptance_rate", "alpha", "wall_s", "tokens_per_s"}
TINY_PROMPT = "the cat sat on the mat and the dog sat on the log and the cat sat on the"


def check_contract(out: dict, num_samples: int, max_new: int) -> None:
    """The documented shape of --json output."""
    assert {"config", "prompt_ids", "samples"} <= set(out)
    assert all(isinstance(i, int) for i in out["prompt_ids"]) and out["prompt_ids"]
    assert len(out["samples"]) == num_samples
    for sample in out["samples"]:
        assert {"output_ids", "text", "steps", "stats"} <= set(sample)
        assert isinstance(sample["text"], str) and 0 < len(sample["output_ids"]) <= max_new
        emitted = [t for step in sample["steps"] for t in step["emitted"]]
        assert emitted == sample["output_ids"]
        for step in sample["steps"]:
            assert STEP_KEYS <= set(step)
            assert step["num_accepted"] == step["fates"].count("accepted") <= len(step["drafted"])
        stats = sample["stats"]
        assert STATS_KEYS <= set(stats)
        assert stats["target_passes"] == len(sample["steps"])
        assert stats["tokens_per_target_pass"] == pytest.approx(len(sample["output_ids"]) / len(sample["steps"]))
        drafted = sum(len(s["drafted"]) for s in sample["steps"])
        accepted = sum(s["num_accepted"] for s in sample["steps"])
        assert stats["acceptance_rate"] == (pytest.approx(accepted / drafted) if drafted else None)
        rounds = [st for st in sample["steps"] if st["drafted"]]
        assert stats["drafting_rounds"] == len(rounds)
        assert stats["mean_acceptance_length"] == (pytest.approx(1 + accepted / len(rounds)) if rounds else None)
        spec = stats["speculative_decoding"]  # vLLM's per-request object, under vLLM's names, from the same steps
        assert spec["per_step_accepted"] == [s["num_accepted"] for s in rounds] and spec["per_step_drafted"] == [len(s["drafted"]) for s in rounds]
        assert (spec["num_spec_steps"], spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]) == (len(rounds), accepted, drafted)
        assert sum(spec["acceptance_histogram"]) == len(rounds) and spec["mean_acceptance_length"] == (stats["mean_acceptance_length"] if rounds else 1.0)  # vLLM's 1.0 before any step
        positions = stats["position_acceptance"]
        assert [p["position"] for p in positions] == list(range(1, len(positions) + 1))
        assert sum(p["accepted"] for p in positions) == accepted
        assert all(p["reached"] >= p["accepted"] for p in positions)
        assert stats["wall_s"] > 0 and stats["tokens_per_s"] > 0


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def parse_one_json(stdout: str) -> dict:
    """Exactly one JSON object on stdout and nothing else."""
    text = stdout.strip()
    obj, end = json.JSONDecoder().raw_decode(text)
    assert end == len(text), f"extra output after the JSON object: {text[end:end + 80]!r}"
    assert isinstance(obj, dict)
    return obj


# -- on a tiny local model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("drafter_args", [["--drafter", "lookup"], ["--drafter", "early-exit", "--exit-layer", "1"]])
def test_json_contract_and_baseline_equality_on_a_tiny_model(capsys, tiny_dir, drafter_args):
    common = ["generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT, "--json", "--max-new-tokens", "10"]
    code, stdout, _ = run_main(capsys, *common, *drafter_args, "-k", "3")
    assert code == 0
    out = parse_one_json(stdout)
    check_contract(out, 1, 10)
    assert out["config"]["num_draft_tokens"] == 3 and out["config"]["baseline"] is False
    code, stdout, _ = run_main(capsys, *common, "--baseline")
    base = parse_one_json(stdout)
    assert code == 0 and base["config"]["baseline"] is True
    assert out["samples"][0]["output_ids"] == base["samples"][0]["output_ids"]
    assert all(s["drafted"] == [] for s in base["samples"][0]["steps"])


def test_draft_model_from_the_command_line(capsys, tiny_dir):
    args = ["generate", "--target", str(tiny_dir["llama"]), "--draft", str(tiny_dir["llama_draft"]), "--drafter", "model"]
    code, stdout, _ = run_main(capsys, *args, "--no-chat", "--prompt", TINY_PROMPT, "--json", "--max-new-tokens", "8")
    assert code == 0
    out = parse_one_json(stdout)
    check_contract(out, 1, 8)
    assert out["samples"][0]["stats"]["alpha"] is not None


def test_num_samples_draws_with_distinct_seeds(capsys, tiny_dir):
    args = ["generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT, "--json"]
    code, stdout, _ = run_main(capsys, *args, "--max-new-tokens", "6", "--num-samples", "3", "--temperature", "1", "--seed", "7")
    assert code == 0
    out = parse_one_json(stdout)
    check_contract(out, 3, 6)
    seeds = [s["seed"] for s in out["samples"]]
    assert len(set(seeds)) == 3 and seeds[0] == 7


def test_plain_output_has_the_text_and_a_stats_line(capsys, tiny_dir):
    args = ["generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT, "--max-new-tokens", "5"]
    code, stdout, _ = run_main(capsys, *args)
    assert code == 0
    lines = stdout.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith(f"[{RunConfig().drafter}] 5 tokens") and "tokens/target pass" in lines[1]
    assert "\033[" not in stdout  # colours only on a terminal


def test_num_samples_does_not_hold_decoders(capsys, tiny_dir, monkeypatch):
    """Each sample's decoder (and its KV caches) is gone before the next is built: memory is flat in N."""
    import gc
    import weakref

    import specviz.runs

    built: list[weakref.ref] = []
    alive_at_build: list[int] = []
    real = specviz.runs.build_decoder

    def counting_build_decoder(*args, **kwargs):
        gc.collect()
        alive_at_build.append(sum(ref() is not None for ref in built))
        decoder = real(*args, **kwargs)
        built.append(weakref.ref(decoder))
        return decoder

    monkeypatch.setattr(specviz.runs, "build_decoder", counting_build_decoder)
    args = ["generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT, "--max-new-tokens", "4", "--temperature", "1"]
    for extra in (["--json"], []):
        built.clear()
        alive_at_build.clear()
        code, stdout, _ = run_main(capsys, *args, "--num-samples", "5", *extra)
        assert code == 0
        gc.collect()
        assert len(built) == 5 and alive_at_build == [0] * 5
        assert all(ref() is None for ref in built)
    check_contract(parse_one_json(run_main(capsys, *args, "--num-samples", "2", "--json")[1]), 2, 4)


@pytest.mark.parametrize("drafter_args", [["--drafter", "lookup"], ["--drafter", "early-exit", "--exit-layer", "1"]])
def test_check_baseline_reports_identity_in_float32(capsys, tiny_dir, drafter_args):
    common = ["generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT, "--max-new-tokens", "10"]
    code, stdout, _ = run_main(capsys, *common, *drafter_args, "--json", "--check-baseline")
    assert code == 0
    out = parse_one_json(stdout)
    check_contract(out, 1, 10)
    sample = out["samples"][0]
    assert sample["same_as_baseline"] is True and sample["first_difference"] is None
    code, stdout, _ = run_main(capsys, *common, *drafter_args, "--check-baseline")
    assert code == 0 and "same as plain greedy" in stdout


def test_check_baseline_names_the_first_difference(capsys, tiny_dir, monkeypatch):
    """A run made to differ (its 3rd token replaced) is reported at that position, with the margins there."""
    import specviz.core.divergence as divergence

    real = divergence.first_divergence

    def tampered(ids, margins, base_ids, base_margins, **kw):
        ids = list(ids)
        ids[2] = (ids[2] + 1) % 50
        return real(ids, margins, base_ids, base_margins, **kw)

    monkeypatch.setattr(generate, "first_divergence", tampered)
    args = ["generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT, "--max-new-tokens", "6", "--json", "--check-baseline"]
    code, stdout, _ = run_main(capsys, *args)
    assert code == 0
    sample = parse_one_json(stdout)["samples"][0]
    diff = sample["first_difference"]
    assert sample["same_as_baseline"] is False and diff["position"] == 2
    assert diff["baseline_token"] == sample["output_ids"][2] and diff["margin"] >= 0 and diff["baseline_margin"] >= 0


@pytest.mark.parametrize(
    "args, words",
    [
        (["-k", "0"], ["between 1 and 16", "got 0"]),
        (["-k", "17"], ["between 1 and 16", "got 17"]),
        (["--temperature", "-1"], ["emperature"]),
        (["--top-p", "0"], ["top_p"]),
        (["--top-p", "1.5"], ["top_p"]),
        (["--drafter", "model"], ["needs a draft model"]),
        (["--num-samples", "0"], ["--num-samples", "at least 1"]),
        (["--max-new-tokens", "0"], ["max new tokens"]),
        (["--check-baseline", "--temperature", "1"], ["--check-baseline", "--temperature 0"]),
        (["--check-baseline", "--baseline"], ["--check-baseline", "drop --baseline"]),
    ],
)
def test_bad_values_exit_2_with_a_message(capsys, args, words):
    code, stdout, stderr = run_main(capsys, "generate", "--prompt", "hello", *args)
    assert code == 2 and stdout == ""
    assert stderr.startswith("error: ")
    for w in words:
        assert w in stderr


def test_empty_prompt_exits_2(capsys):
    code, _, stderr = run_main(capsys, "generate", "--prompt", "   ")
    assert code == 2 and "empty" in stderr


def test_a_missing_target_exits_2(capsys, tmp_path):
    code, _, stderr = run_main(capsys, "generate", "--target", str(tmp_path / "nope"), "--prompt", "hi")
    assert code == 2 and "No model folder or file" in stderr


@pytest.fixture
def no_loading(monkeypatch):
    """Loading a model fails the test: a bad output path must be refused before any model loads or any run decodes."""
    import specviz.runs

    def refuse(*args, **kwargs):
        raise AssertionError("the models were loaded before the output path was checked")

    monkeypatch.setattr(specviz.runs, "resolve_models", refuse)


def _unwritable(tmp_path: Path) -> Path:
    """A file no one may create here: inside /proc when running as root (who may write any folder), else a read-only folder."""
    if os.geteuid() == 0:
        return Path("/proc/specviz-test-recording.json")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    return locked / "run.json"


@pytest.mark.parametrize(
    ("where", "words"),
    [("folder", ["is a folder", "run.json"]), ("missing parent", ["does not exist", "create it first"]),
     ("file as parent", ["is not a folder"]), ("unwritable", ["cannot be written"])],
)  # fmt: skip
def test_record_checks_its_path_before_decoding(capsys, tmp_path, no_loading, where, words):
    (tmp_path / "a-file").write_text("x")
    path = {"folder": tmp_path, "missing parent": tmp_path / "nope" / "run.json", "file as parent": tmp_path / "a-file" / "run.json",
            "unwritable": _unwritable(tmp_path)}[where]  # fmt: skip
    code, stdout, stderr = run_main(capsys, "generate", "--prompt", "hello", "--record", str(path))
    assert code == 2 and stdout == ""
    assert stderr.startswith("error: --record ") and all(w in stderr for w in words), stderr


def test_record_leaves_no_file_behind_when_checking_a_good_path(tmp_path, capsys):
    path = tmp_path / "run.json"
    check_output_file(str(path), "--record")
    assert not path.exists()
    path.write_text("old")
    check_output_file(str(path), "--record")
    assert path.read_text() == "old"


def test_bench_out_checks_its_path_before_the_sweep(capsys, tmp_path, no_loading):
    code, _, stderr = run_main(capsys, "bench", "--out", str(tmp_path / "nope" / "table.csv"))
    assert code == 2 and "--out" in stderr and "does not exist" in stderr, stderr


# -- on the embedded SmolLM2, as the README runs it -----------------------------------------------------------


README_PROMPT = "Write a Python function that reverses a string."


def run_module(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "specviz", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.smollm
def test_readme_command_prints_one_json_object_equal_to_the_baseline(capsys, monkeypatch, smollm):
    proc = run_module("generate", "--prompt", README_PROMPT, "--json", "--max-new-tokens", "24")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = parse_one_json(proc.stdout)
    check_contract(out, 1, 24)
    assert out["config"]["drafter"] == RunConfig().drafter and out["config"]["target"].startswith("embedded:")
    sample = out["samples"][0]
    assert sample["text"].strip() and len(sample["output_ids"]) == 24
    # the baseline, in-process with the already loaded model (the subprocess above proved loading)
    monkeypatch.setattr("specviz.models.load_model", lambda *a, **k: smollm)
    code, stdout, _ = run_main(capsys, "generate", "--prompt", README_PROMPT, "--json", "--max-new-tokens", "24", "--baseline")
    assert code == 0
    base = parse_one_json(stdout)
    assert base["prompt_ids"] == out["prompt_ids"]
    assert base["samples"][0]["output_ids"] == sample["output_ids"]
    assert base["samples"][0]["text"] == sample["text"]


@pytest.mark.smollm
def test_num_samples_at_temperature_one_on_smollm(capsys, monkeypatch, smollm):
    monkeypatch.setattr("specviz.models.load_model", lambda *a, **k: smollm)
    args = ["generate", "--prompt", README_PROMPT, "--json", "--max-new-tokens", "8", "--num-samples", "3", "--temperature", "1"]
    code, stdout, _ = run_main(capsys, *args)
    assert code == 0
    out = parse_one_json(stdout)
    check_contract(out, 3, 8)
    assert len({s["seed"] for s in out["samples"]}) == 3


# -- terminal control sequences from a file or a model are printed escaped ---------------------------------------

CLEAR = "\x1b[2J"  # clear the screen
TITLE = "\x1b]0;pwned\x07"  # OSC 0: set the window title
LINK = "\x1b]8;;http://127.0.0.1:1/x\x1b\\click\x1b]8;;\x1b\\"  # OSC 8: a clickable link
C1 = "\x9b2J\x9d0;t\x9c\r\x08\x7f"  # CSI and OSC as C1 characters, ST, a carriage return, a backspace, DEL
HOSTILE_TERMINAL = CLEAR + TITLE + LINK + C1
OUR_COLOURS = re.compile(r"\x1b\[(?:0|32|33|36|90)m")  # the only escape sequences replay may write (on a terminal)


def assert_no_control(text: str) -> None:
    """Nothing but newline, tab and our own colour codes below U+0020 or in C1."""
    bare = OUR_COLOURS.sub("", text)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", bare), repr(bare[:300])


def test_terminal_text_escapes_c0_and_c1_but_newline_and_tab():
    assert terminal_text("a\tb\nc") == "a\tb\nc"
    assert terminal_text(CLEAR) == "\\x1b[2J"
    assert terminal_text("\x9b\x07\x00\x7f") == "\\x9b\\x07\\x00\\x7f"
    assert_no_control(terminal_text(HOSTILE_TERMINAL))


def _hostile_terminal_recording(path: Path) -> Path:
    example = sorted((REPO / "assets" / "recordings").glob("*.json"))[0]
    raw = json.loads(example.read_text(encoding="utf-8"))
    raw["title"] = HOSTILE_TERMINAL
    raw["environment"]["model"] = HOSTILE_TERMINAL
    raw["environment"]["device_name"] = TITLE
    for tid in raw["token_texts"]:
        raw["token_texts"][tid] = HOSTILE_TERMINAL
    raw["runs"][0]["label"] = "run \x07\x1bc"  # BEL and RIS (reset the terminal) pass the label rules
    raw["runs"][0]["error"] = HOSTILE_TERMINAL
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "terminal"])
def test_replay_prints_control_sequences_escaped(capsys, tmp_path, monkeypatch, tty):
    path = _hostile_terminal_recording(tmp_path / "hostile.json")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    code, stdout, stderr = run_main(capsys, "replay", str(path))
    assert code == 0
    assert_no_control(stdout)
    assert_no_control(stderr)
    shown = stdout + stderr
    assert "\\x1b[2J" in shown and "\\x1b]0;pwned\\x07" in shown and "\\x9b2J" in shown and "stopped by an error" in shown


def test_error_messages_are_escaped(capsys, monkeypatch):
    def fail(args):
        raise ValueError(f"bad {HOSTILE_TERMINAL}")

    monkeypatch.setattr(replay, "run", fail)
    code, _, stderr = run_main(capsys, "replay", "x.json")
    assert code == 2 and stderr.startswith("error: bad \\x1b[2J")
    assert_no_control(stderr)


@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "terminal"])
def test_generate_text_output_escapes_what_the_model_decodes(capsys, tiny_dir, tiny_models, monkeypatch, tty):
    tokenizer_type = type(tiny_models["llama"].tokenizer)
    decode = tokenizer_type.decode
    monkeypatch.setattr(tokenizer_type, "decode", lambda self, *a, **k: HOSTILE_TERMINAL + decode(self, *a, **k))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    code, stdout, stderr = run_main(capsys, "generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT,
                                    "--max-new-tokens", "4")  # fmt: skip
    assert code == 0 and "\\x1b[2J" in stdout
    assert_no_control(stdout)
    assert_no_control(re.sub(r"[^\n]*Loading weights[^\n]*\n?", "", stderr))  # transformers' own progress bar is not ours


def test_json_output_escapes_control_characters(capsys, tiny_dir, tiny_models, monkeypatch):
    tokenizer_type = type(tiny_models["llama"].tokenizer)
    decode = tokenizer_type.decode
    monkeypatch.setattr(tokenizer_type, "decode", lambda self, *a, **k: HOSTILE_TERMINAL + decode(self, *a, **k))
    code, stdout, _ = run_main(capsys, "generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", TINY_PROMPT,
                               "--max-new-tokens", "4", "--json")  # fmt: skip
    assert code == 0 and "\\u001b[2J" in stdout
    assert_no_control(stdout.rstrip("\n"))
    assert parse_one_json(stdout)["samples"][0]["text"].startswith(HOSTILE_TERMINAL)


def test_log_lines_are_escaped_too():
    import logging

    record = logging.LogRecord("specviz", logging.WARNING, __file__, 1, "model %s failed", (HOSTILE_TERMINAL,), None)
    line = EscapingFormatter(logging.BASIC_FORMAT).format(record)
    assert "\\x1b[2J" in line
    assert_no_control(line)


def test_every_print_in_the_cli_goes_through_emit():
    """No print() or sys.stdout/stderr.write outside emit (and the JSON's closing newline): a new print path cannot
    skip the escaping."""
    import ast

    modules = sorted((REPO / "specviz" / "cli").glob("*.py"))
    assert len(modules) > 10  # the package, not a stray file
    raw = []
    for path in modules:
        for func in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(func, ast.FunctionDef) or func.name == "emit":
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Call):
                    name = ast.unparse(node.func)
                    if name == "print" or name.endswith(("stdout.write", "stderr.write")) and ast.unparse(node) != "sys.stdout.write('\\n')":
                        raw.append(f"{path.name}:{func.name}: {ast.unparse(node)[:60]}")
    assert not raw, raw


def test_building_the_parser_imports_neither_transformers_nor_streamlit():
    """Every subcommand's add_parser runs for any command (replay and --help included): their defaults may import the
    experiments and the service's config, never a model library or the UI (those load inside run)."""
    code = ("import sys; from specviz.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('transformers', 'streamlit', 'specviz.workshop.service.config', 'specviz.workshop.service.server', "
            "'specviz.cli.room') if m in sys.modules))")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(REPO), env=env)
    # the serve and room parsers were built (their modules are there), and nothing heavier came with them (the service's
    # config, not its server)
    assert proc.stdout.strip() == "['specviz.cli.room', 'specviz.workshop.service.config']", proc.stdout + proc.stderr
