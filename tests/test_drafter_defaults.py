"""Each drafter's defaults are its measured best (issue 44): the table in specviz.drafters.specs is what
scripts/drafter_defaults.py derives from the shipped measurements, and the CLI and the sidebar apply it when a drafter
is chosen, unless the user set the value."""

from __future__ import annotations

import runpy
from pathlib import Path

import pandas as pd

from specviz.cli.main import build_parser
from specviz.cli.options import config_from_args
from specviz.config import RunConfig
from specviz.drafters.specs import DRAFTERS, MEASURED_BEST, Tuning, drafter_spec
from tests.test_app_compare_tree import local, step_page  # noqa: F401  (local is a fixture)

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "drafter_defaults.py"


def script() -> dict:
    return runpy.run_path(str(SCRIPT), run_name="drafter_defaults")


def tuned(config: RunConfig) -> tuple[int, int, int]:
    return config.num_draft_tokens, config.tree_width, config.draft_vocab


def cli(*argv: str) -> RunConfig:
    return config_from_args(build_parser().parse_args(["generate", "--prompt", "hi", *argv]))


def test_the_table_is_what_the_script_derives_from_the_shipped_measurements():
    s = script()
    best = s["best_settings"](list(s["SHIPPED"]))
    assert {kind: b.tuning for kind, b in best.items()} == MEASURED_BEST
    assert s["render"](best) in (ROOT / "specviz" / "drafters" / "specs.py").read_text(encoding="utf-8")  # as --write wrote it
    assert MEASURED_BEST["medusa"] == Tuning(2, 1, 8192)  # docs/benchmarks.md: Medusa's chain of 2 over V' = 8,192
    for kind, tuning in MEASURED_BEST.items():
        spec = drafter_spec(kind)
        assert spec.can_branch or tuning.tree_width == 1
        assert spec.cuts_vocab or tuning.draft_vocab == 0


def test_the_script_follows_the_measurements(tmp_path):
    """A sweep where k = 8 wins on prose gives k = 8: the table comes from the numbers, not from the script."""
    rows = [dict(category=c, drafter="ngram", k=k, temperature=0, speedup=(1.2 if k == 8 else 0.9) if c == "prose" else 1.0)
            for c in ("prose", "code") for k in (4, 8)]  # fmt: skip
    table = tmp_path / "bench.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    best = script()["best_settings"]([table])
    assert list(best) == ["ngram"] and best["ngram"].tuning == Tuning(8, 1, 0)
    assert (best["ngram"].worst, best["ngram"].mean) == (1.2, 1.1)


def test_the_default_drafter_starts_at_its_measured_best():
    assert RunConfig().drafter == DRAFTERS[0].kind
    assert tuned(RunConfig()) == tuple(vars(DRAFTERS[0].defaults).values())
    assert cli() == RunConfig()


def test_a_drafter_chosen_on_the_command_line_gets_its_measured_best():
    assert tuned(cli("--drafter", "medusa")) == (2, 1, 8192)
    assert tuned(cli("--drafter", "eagle")) == tuple(vars(MEASURED_BEST["eagle"]).values())
    assert tuned(cli("--drafter", "model", "--draft", "x")) == (8, 1, 0)  # not measured: the engine's old defaults


def test_a_value_given_on_the_command_line_stays():
    assert tuned(cli("--drafter", "medusa", "--num-draft-tokens", "5")) == (5, 1, 8192)
    assert tuned(cli("--drafter", "medusa", "--draft-vocab", "0")) == (2, 1, 0)
    assert tuned(cli("--drafter", "medusa", "-k", "4", "--tree-width", "2")) == (4, 2, 8192)
    assert tuned(cli("--drafter", "ngram", "-k", "8")) == (8, 1, 0)


def test_choosing_a_drafter_in_the_sidebar_applies_its_measured_best(local):  # noqa: F811
    at = step_page(local, auto_k=False)  # the n-gram model at its defaults, k fixed (so k's slider is k)
    assert at.slider(key="num_draft_tokens").value == MEASURED_BEST["ngram"].num_draft_tokens
    at.selectbox(key="drafter").select("medusa").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.slider(key="num_draft_tokens").value == 2
    assert at.selectbox(key="draft_vocab").value == 8192
    assert any("k = 2, draft vocabulary 8,192: this drafter's measured best here" in c.value for c in at.sidebar.caption)
    at.selectbox(key="drafter").select("ngram").run()
    assert at.slider(key="num_draft_tokens").value == MEASURED_BEST["ngram"].num_draft_tokens
    assert at.session_state["draft_vocab"] == 0


def test_a_k_the_user_set_survives_switching_drafters(local):  # noqa: F811
    at = step_page(local, auto_k=False)
    at.slider(key="num_draft_tokens").set_value(6).run()
    at.selectbox(key="drafter").select("medusa").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.slider(key="num_draft_tokens").value == 6  # set by the user: kept
    assert at.selectbox(key="draft_vocab").value == 8192  # not set by the user: Medusa's best
    assert any("This drafter's measured best here: k = 2" in c.value and "you changed it" in c.value for c in at.sidebar.caption)
    at.selectbox(key="drafter").select("eagle").run()
    assert at.slider(key="num_draft_tokens").value == 6
    assert at.slider(key="tree_width").value == MEASURED_BEST["eagle"].tree_width


def test_a_linked_value_is_not_replaced(local):  # noqa: F811
    """A share link (or a fork) puts the drafter and k into session state together: no menu change, so k stays."""
    at = step_page(local, drafter="medusa", num_draft_tokens=4, draft_vocab=0, auto_k=False)
    assert (at.slider(key="num_draft_tokens").value, at.selectbox(key="draft_vocab").value) == (4, 0)


def test_serve_and_batch_start_each_drafter_at_its_measured_best():
    from specviz.cli.serve import service_config

    for argv, expected in ((["--drafter", "medusa"], (2, 1, 8192)), (["--drafter", "medusa", "-k", "3", "--tree-width", "2"], (3, 2, 8192))):
        args = build_parser().parse_args(["serve", *argv])
        assert tuned(service_config(args, args.drafter, False).run) == expected
    assert build_parser().parse_args(["batch"]).num_draft_tokens is None  # the drafter's best, filled in by run()


def test_the_docs_table_says_what_the_code_does():
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").split("## Each drafter's defaults", 1)[1].split("\n## ", 1)[0]
    rows = {cells[0]: cells[1:4] for line in text.splitlines() if line.startswith("| ") and not line.startswith("| drafter")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}  # fmt: skip
    expected = {drafter_spec(kind).short_name: [str(t.num_draft_tokens), str(t.tree_width), f"{t.draft_vocab:,}" if t.draft_vocab else "full"]
                for kind, t in MEASURED_BEST.items()}  # fmt: skip
    assert rows == expected


def test_a_share_link_leaves_out_the_drafters_best_and_opens_at_it(local):  # noqa: F811
    from streamlit.testing.v1 import AppTest

    from specviz.ui.room.share import link_for
    from tests.test_app_compare_tree import PAGES

    assert link_for(RunConfig(drafter="medusa", num_draft_tokens=2, draft_vocab=8192), "p", "p").query == {"drafter": "medusa"}
    assert link_for(RunConfig(drafter="medusa", num_draft_tokens=4), "p", "p").query == {"drafter": "medusa", "num_draft_tokens": "4"}
    for query, k in (({"drafter": "medusa", "auto_k": "false"}, 2), ({"drafter": "medusa", "num_draft_tokens": "4", "auto_k": "false"}, 4)):
        at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
        at.session_state["target"] = local
        for key, value in query.items():
            at.query_params[key] = value
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert (at.slider(key="num_draft_tokens").value, at.selectbox(key="draft_vocab").value) == (k, 8192)


def test_under_auto_k_the_slider_is_autos_ceiling_and_k_comes_back_when_auto_is_off(local):  # noqa: F811
    """k: auto is on by default: k's slider reads as auto's ceiling (max_draft_tokens, its label from the field table)
    and sets it; off, the slider is the fixed k again, at the value it had; the measured-best caption says which."""
    from specviz.config import field_named
    from tests.test_app_compare_tree import STATE, click

    at = step_page(local)  # the n-gram drafter, k = 4 held
    ceiling = at.slider(key="max_draft_tokens")
    assert ceiling.label == field_named("max_draft_tokens").label == "k at most (auto picks each round's k up to this)"
    assert ceiling.help and not [s for s in at.sidebar.slider if s.key == "num_draft_tokens"]
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "k = 4: this drafter's measured best here" in captions and "k: auto picks each round's k instead, up to 16" in captions
    ceiling.set_value(2).run()
    click(at, "step")
    config = at.session_state[STATE].session.config
    assert (config.k_policy, config.max_draft_tokens, config.num_draft_tokens) == ("auto", 2, 4)  # the slider set auto's ceiling
    assert all(r.num_draft_tokens <= 2 for r in at.session_state[STATE].session.runs[0].records)
    at.toggle(key="auto_k").set_value(False).run()
    assert not at.exception, [e.value for e in at.exception]
    k = at.slider(key="num_draft_tokens")
    assert (k.label, k.value) == (field_named("num_draft_tokens").label, 4)  # k as it was before auto hid it
    assert not [s for s in at.sidebar.slider if s.key == "max_draft_tokens"]
    assert "k: auto picks" not in " ".join(c.value for c in at.sidebar.caption)
    at.toggle(key="auto_k").set_value(True).run()
    assert at.slider(key="max_draft_tokens").value == 2  # the ceiling the user set comes back with auto
