"""The Speedup theory page's speedup-by-k chart shows what k: auto chose in this session's step-through run (issue 44):
the counting is a pure function of the records (fast), the page draws it with a caption and a way back, and says how to
get such a run when there is none (AppTest, the step-through session faked)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from specviz.core.auto_k import KChoice
from specviz.viz.theory import AUTO_K_COLUMNS, auto_k_caption, auto_k_counts, speedup_vs_k_figure
from tests.test_app_pages import PAGES, TIMEOUT


def choice(k: int) -> KChoice:
    return KChoice(k=k, acceptance=(0.8,) * k, verify_cost=1.2, draft_cost=0.05, tokens_per_pass=1.4, next_k=k + 1, next_tokens_per_pass=1.3)


def record(k: int | None) -> SimpleNamespace:
    """A round as the counting reads it: its k_choice (None: a fixed or adaptive k chose it)."""
    return SimpleNamespace(k_choice=None if k is None else choice(k))


AUTO_RECORDS = [record(k) for k in (0, 3, 3, 4, 3, 0, 2)]


def test_counts_each_chosen_k_in_k_order_and_skips_rounds_auto_did_not_choose():
    counts = auto_k_counts(AUTO_RECORDS + [record(None)])
    assert list(counts.columns) == list(AUTO_K_COLUMNS)
    assert counts.values.tolist() == [[0, 2], [2, 1], [3, 3], [4, 1]]
    assert auto_k_counts([record(None), record(None)]).empty and auto_k_counts([]).empty


def test_the_caption_names_the_run_the_most_chosen_k_and_the_plain_passes():
    text = auto_k_caption(auto_k_counts(AUTO_RECORDS), "ngram k: auto")
    assert "(ngram k: auto)" in text and "how many of its 7 rounds chose it" in text and "it chose k = 3 most" in text
    assert "2 rounds were plain passes (k = 0)" in text and "above k" not in text
    plain = auto_k_caption(auto_k_counts([record(0), record(0), record(1)]), "A")
    assert "it chose a plain pass (k = 0) most" in plain and "of its 3 rounds" in plain
    assert "of its 1 round chose it" in auto_k_caption(auto_k_counts([record(2)]), "A")
    assert "1 round above k = 4" in auto_k_caption(auto_k_counts([record(5), record(2)]), "A", k_max=4)


def test_the_chart_puts_a_diamond_on_each_chosen_k_at_its_bar():
    counts = auto_k_counts(AUTO_RECORDS)
    fig = speedup_vs_k_figure(0.7, 0.05, 1.0, 4, chosen=counts)
    bars, diamonds = fig.data
    assert diamonds.name == "k: auto chose" and diamonds.marker.symbol == "diamond"
    assert list(diamonds.x) == [2, 3, 4]  # k = 0 is off the chart (the caption counts it)
    assert list(diamonds.text) == ["1", "3", "1"]
    heights = dict(zip(bars.x, bars.y, strict=True))
    assert list(diamonds.y) == pytest.approx([heights[2], heights[3], heights[4]])
    assert len(speedup_vs_k_figure(0.7, 0.05, 1.0, 4).data) == 1  # no run: the bars alone
    assert len(speedup_vs_k_figure(0.7, 0.05, 1.0, 4, chosen=auto_k_counts([record(0)])).data) == 1


def _theory_page(monkeypatch, runs: list | None, through_app: bool = False) -> AppTest:
    """The theory page with this session's step-through runs faked (None: no step-through run at all); through_app:
    opened through app.py's navigation, as a browser opens it (so links to other pages resolve)."""
    import specviz.ui.labs.measured as measured
    from specviz.ui.common.keys import STEP_THROUGH_KEY
    from specviz.ui.step_through.session import PageState

    monkeypatch.setattr(measured, "step_through_points", lambda: pd.DataFrame(columns=["source", "label", "alpha", "k", "speedup"]))
    at = AppTest.from_file(str(PAGES.parent / "app.py" if through_app else PAGES / "theory.py"), default_timeout=TIMEOUT)
    if runs is not None:
        at.session_state[STEP_THROUGH_KEY] = PageState(session=SimpleNamespace(runs=runs))  # type: ignore[arg-type]
    (at.switch_page("pages/theory.py") if through_app else at).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_marks_autos_ks_and_points_back_to_the_step_through_page(monkeypatch):
    fixed = SimpleNamespace(label="A: lookup k = 4", records=[record(None)])
    auto = SimpleNamespace(label="B: ngram k: auto", records=AUTO_RECORDS)
    at = _theory_page(monkeypatch, [fixed, auto])
    captions = [c.value for c in at.caption]
    assert any("Diamonds: the ks k: auto chose in your step-through run (B: ngram k: auto)" in c for c in captions), captions
    assert any("Step through in the page menu" in c for c in captions), captions  # a page run alone: the link's words
    charts = [c for c in at.get("plotly_chart") if "k: auto chose" in c.proto.spec]
    assert len(charts) == 1
    at = _theory_page(monkeypatch, [fixed, auto], through_app=True)
    links = [(p.proto.label, p.proto.page) for p in at.get("page_link")]
    assert links == [("Back to its rounds: each one's reason in the round inspector", "")]  # "": the step-through page, the default


def test_without_an_auto_run_the_page_says_how_to_get_one(monkeypatch):
    for runs in (None, [SimpleNamespace(label="A: lookup k = 4", records=[record(None)])]):
        at = _theory_page(monkeypatch, runs)
        captions = [c.value for c in at.caption]
        assert any(c.startswith("Step through a run with k: auto") for c in captions), captions
        assert not any("Diamonds:" in c for c in captions)
