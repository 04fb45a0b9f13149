"""Every subcommand's flags that are RunConfig fields come from the field table (specviz.cli.options.add_run_options):
the same help, default and type as `generate`'s unless the subcommand says where it differs; and the flags `serve`
gained (--eagle-head, --draft-vocab, --top-k, --top-p, --adaptive-k, --ngram-min) reach the runs it serves."""

from __future__ import annotations

import argparse

import openai
import pytest

from specviz import cli
from specviz.cli.options import add_run_options, run_fields, run_values
from specviz.cli.serve import service_config
from specviz.config import FIELDS
from specviz.workshop.service.request import check_request
from tests.service_helpers import serving

pytestmark = pytest.mark.usefixtures("one_thread")

TABLE_FLAGS = {flag: s.name for s in FIELDS for flag in s.flags}
NOT_RUN_FLAGS = {  # named like a field but not a run's: the training's own, a sweep's list, what a probe asks another server for
    ("train-heads", "--seed"), ("train-heads", "--max-new-tokens"), ("train-heads", "--draft-vocab"), ("bench", "--tree-width"),
    ("probe", "--temperature"),
}  # fmt: skip
COMPARED = ("help", "default", "type", "choices", "metavar", "nargs", "const")


def subcommands(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    parser = parser or cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def drift(parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    """'subcommand flag: why' for each flag named like a field of the table that was not made from its row, or that
    differs from generate's where the subcommand does not say it differs."""
    reference = {a.field: a for a in parsers["generate"]._actions if hasattr(a, "field")}
    out = []
    for name, sub in parsers.items():
        for action in sub._actions:
            flags = [f for f in action.option_strings if f in TABLE_FLAGS and (name, f) not in NOT_RUN_FLAGS]
            if not flags:
                continue
            if not hasattr(action, "field"):
                out.append(f"{name} {flags[0]}: written by hand")
                continue
            ref = reference[action.field]
            for key in COMPARED:
                if key not in action.differs and getattr(action, key) != getattr(ref, key):
                    out.append(f"{name} {flags[0]}: {key} differs from generate's")
    return out


def test_every_shared_flag_comes_from_the_field_table():
    parsers = subcommands()
    assert drift(parsers) == []
    counts = {name: sum(hasattr(a, "field") for a in sub._actions) for name, sub in parsers.items()}
    assert all(counts[n] >= 6 for n in ("serve", "serve-pair", "batch", "bench", "profile")) and counts["train-heads"] == 5
    # known-bad controls: a hand-written --device, and a table flag whose help changed without saying so
    bad = argparse.ArgumentParser()
    bad.add_argument("--device", default="auto")
    assert drift({**parsers, "bad": bad}) == ["bad --device: written by hand"]
    quiet = argparse.ArgumentParser()
    add_run_options(quiet, only=("dtype",))
    quiet._actions[-1].help = "another help"
    assert drift({**parsers, "quiet": quiet}) == ["quiet --dtype: help differs from generate's"]


def test_only_skip_and_differ_name_fields_that_have_flags():
    assert [s.name for s in run_fields(only=("dtype", "target"))] == ["target", "dtype"]  # the table's order
    for bad in ({"only": ("max_draft_tokens",)}, {"only": ("tagret",)}, {"skip": ("nope",)}):
        with pytest.raises(ValueError, match="not a RunConfig field with a flag"):
            run_fields(**bad)
    with pytest.raises(ValueError, match="differ names fields"):
        add_run_options(argparse.ArgumentParser(), only=("target",), differ={"device": {"default": "cpu"}})


def test_train_heads_says_where_its_device_default_differs():
    args = cli.build_parser().parse_args(["train-heads"])
    assert args.device == "cpu" and run_values(args, only=("device",)) == {"device": "cpu"}
    assert cli.build_parser().parse_args(["profile"]).device == "auto"


SERVE_FLAGS = ["--eagle-head", "/nowhere/eagle", "--draft-vocab", "4096", "--top-k", "1", "--top-p", "0.9", "--adaptive-k", "--ngram-min", "2"]


def test_serve_takes_every_drafter_and_sampling_flag_and_its_requests_keep_them():
    args = cli.build_parser().parse_args(["serve", "--drafter", "eagle", *SERVE_FLAGS])
    config = service_config(args, args.drafter, False)
    run = config.run
    assert (run.eagle_head, run.draft_vocab, run.top_k, run.top_p, run.adaptive_k, run.ngram_min) == ("/nowhere/eagle", 4096, 1, 0.9, True, 2)
    assert run.k_policy == "adaptive" and run.decode_config().sampling.top_k == 1
    # a request that names its own top_p keeps the rest of the flags' run
    checked = check_request({"model": config.model_id, "messages": [{"role": "user", "content": "hi"}], "top_p": 0.5}, "chat", config)
    assert (checked.run.top_p, checked.run.top_k, checked.run.adaptive_k, checked.run.eagle_head, checked.run.draft_vocab) == (0.5, 1, True, "/nowhere/eagle", 4096)
    # serve-pair passes them on to both of its serves
    pair = cli.build_parser().parse_args(["serve-pair", *SERVE_FLAGS])
    from specviz.cli.serve_pair import _service_argv

    argv = _service_argv(pair)
    for flag in ("--eagle-head", "--draft-vocab", "--top-k", "--top-p", "--adaptive-k", "--ngram-min"):
        assert flag in argv, flag
    assert argv[argv.index("--top-k") + 1] == "1"


def test_serve_loads_the_eagle_head_its_flag_names(tiny_dir):
    from specviz.runs import resolve_models

    args = cli.build_parser().parse_args(["serve", "--target", str(tiny_dir["llama"]), "--device", "cpu", "--dtype", "float32", "--drafter", "eagle",
                                          "--eagle-head", str(tiny_dir["llama"] / "no-eagle-here")])  # fmt: skip
    with pytest.raises(Exception, match="no-eagle-here"):
        resolve_models(service_config(args, args.drafter, False).run)


def _served(tiny_dir, *flags: str) -> tuple[str, dict]:
    from specviz.runs import resolve_models
    from specviz.workshop.service.server import load_on_model_thread

    argv = ["serve", "--target", str(tiny_dir["llama"]), "--device", "cpu", "--dtype", "float32", "--drafter", "ngram", "--max-tokens", "12", *flags]
    args = cli.build_parser().parse_args(argv)
    config = service_config(args, args.drafter, False)
    service = load_on_model_thread(config, lambda: resolve_models(config.run))
    with serving(service) as root, openai.OpenAI(base_url=root + "/v1", api_key="x", max_retries=0, timeout=120) as client:
        r = client.completions.create(model=config.model_id, prompt="the cat sat on the", max_tokens=12)
    return r.choices[0].text, r.usage.model_extra["specviz"]


def test_serves_top_k_and_adaptive_k_take_effect_in_its_runs(tiny_dir):
    """--top-k 1 at temperature 1.5 is greedy decoding; --adaptive-k is the run's k policy. Known-bad control: the same
    temperature without --top-k samples another text from the tiny random model."""
    greedy, _ = _served(tiny_dir)
    top1, truth = _served(tiny_dir, "--temperature", "1.5", "--seed", "3", "--top-k", "1", "--adaptive-k")
    sampled, plain_truth = _served(tiny_dir, "--temperature", "1.5", "--seed", "3")
    assert top1 == greedy and sampled != greedy
    assert truth["k_policy"] == "adaptive" and plain_truth["k_policy"] == "auto"
