"""specviz.viz: frames, token-view HTML and figures, built from records of real runs on toy language models."""

from __future__ import annotations

import subprocess
import sys
from html.parser import HTMLParser

import pandas as pd
import pytest
import torch

from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.metrics import run_metrics
from specviz.core.sampling import SamplingConfig
from specviz.core.theory import expected_tokens
from specviz.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specviz.viz import (
    figures,
    latency_frame,
    legend_html,
    position_frame,
    position_info,
    progress_frame,
    rounds_frame,
    stream_frame,
    token_stream_html,
    verify_cost_ratio,
    visible_html,
)
from tests import toys

VOCAB = 12
TEXTS = {i: f"t{i}" for i in range(VOCAB)}


class BigramLM(toys.BigramLM):
    """The shared toy bigram LM over this module's vocabulary, sharper than its default."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed, VOCAB, sharpness=3.0)


PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]


def run(drafter, *, temperature: float = 1.0, k: int = 4, max_new: int = 40, seed: int = 0) -> SpeculativeDecoder:
    config = DecodeConfig(num_draft_tokens=k, sampling=SamplingConfig(temperature=temperature), seed=seed, max_new_tokens=max_new)
    decoder = SpeculativeDecoder(BigramLM(0), drafter, PROMPT, config)
    decoder.run()
    return decoder


@pytest.fixture(scope="module")
def model_run() -> SpeculativeDecoder:
    """A draft model with a real q: a noisier copy of the target's table."""
    draft = BigramLM(0)
    draft.table = draft.table + torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(7)) * 1.5
    return run(ModelDrafter(draft, SamplingConfig(temperature=1.0)))


@pytest.fixture(scope="module")
def lookup_run() -> SpeculativeDecoder:
    return run(PromptLookupDrafter(3, 1), temperature=0.0)


@pytest.fixture(scope="module")
def baseline_run() -> SpeculativeDecoder:
    return run(NoDrafter(), k=0)


def test_model_run_has_every_fate(model_run):
    fates = {f for r in model_run.records for f in r.emitted_fates} | {f for r in model_run.records for f in r.draft_fates}
    assert {"accepted", "rejected", "resampled", "bonus"} <= fates  # the fixture exercises what the views draw


def test_stream_frame_reads_the_committed_tokens_in_order(model_run):
    df = stream_frame(model_run.records, TEXTS.__getitem__)
    committed = df[df["kind"].isin(["accepted", "resampled", "bonus", "target"])]
    assert committed["token_id"].tolist() == model_run.generated
    thrown = df[df["kind"].isin(["rejected", "discarded"])]
    assert len(thrown) == sum(r.num_drafted - r.num_accepted for r in model_run.records)
    for r in model_run.records:  # thrown-away drafts sit between the kept ones and the resampled token
        kinds = df[df["round"] == r.index + 1]["kind"].tolist()
        if "resampled" in kinds:
            assert kinds == ["accepted"] * r.num_accepted + list(r.draft_fates[r.num_accepted :]) + ["resampled"]
    assert df.groupby("round")["first_in_round"].sum().eq(1).all()


def test_rounds_frame_agrees_with_run_metrics(model_run):
    df = rounds_frame(model_run.records)
    stats = run_metrics(model_run.records)
    last = df.iloc[-1]
    assert last["tokens"] == stats.new_tokens == len(model_run.generated)
    assert last["tokens_per_target_pass"] == pytest.approx(stats.tokens_per_target_pass)
    assert last["acceptance_rate"] == pytest.approx(stats.acceptance_rate)
    assert last["alpha"] == pytest.approx(stats.alpha)
    assert last["theory_tokens_per_target_pass"] == pytest.approx(expected_tokens(last["alpha"], int(last["k_mean"])))
    assert df["speedup"].isna().all()  # no baseline, no measured speedup


def test_alpha_of_a_one_hot_drafter_is_p_target_of_its_checked_drafts(lookup_run):
    df = rounds_frame(lookup_run.records)
    checked = [p for r in lookup_run.records for p, f in zip(r.p_target, r.draft_fates) if f != "discarded"]
    assert checked, "prompt lookup should have drafted on a repetitive prompt"
    assert df["alpha"].iloc[-1] == pytest.approx(sum(checked) / len(checked))
    assert run_metrics(lookup_run.records).alpha == pytest.approx(df["alpha"].iloc[-1])  # the engine's stats agree


def test_speedup_columns_use_the_baseline_cadence(model_run, baseline_run):
    df = rounds_frame(model_run.records, "model", baseline_run.records)
    base_ms = [r.round_ms for r in baseline_run.records]
    n = int(df["tokens"].iloc[0])
    assert df["baseline_ms"].iloc[0] == pytest.approx(sum(base_ms[:n]))
    assert df["speedup"].iloc[-1] == pytest.approx(df["baseline_ms"].iloc[-1] / df["decode_ms"].iloc[-1])
    drafted = sum(r.num_drafted for r in model_run.records)
    c = sum(r.draft_ms for r in model_run.records) / drafted / (sum(base_ms) / len(base_ms))
    assert df["c"].iloc[-1] == pytest.approx(c)
    assert df["predicted_speedup"].notna().all() or df["alpha"].isna().any()
    assert verify_cost_ratio(model_run.records, baseline_run.records) > 0


def test_latency_frame_puts_a_rounds_tokens_together(model_run):
    df = latency_frame(model_run.records, "model")
    assert len(df) == len(model_run.generated)
    assert (df["gap_ms"] > 0).sum() == len(model_run.records)
    prog = progress_frame(model_run.records, "model")
    assert prog["tokens"].iloc[-1] == len(model_run.generated) and prog["tokens"].iloc[0] == 0


def test_position_frame_marks_the_drafted_and_the_resampled_token(model_run):
    record = next(r for r in model_run.records if "rejected" in r.draft_fates)
    pos = record.draft_fates.index("rejected")
    info = position_info(record, pos)
    assert info.fate == "rejected" and info.next_fate == "resampled" and info.drafted == record.drafted[pos]
    df = position_frame(record, pos, TEXTS.__getitem__)
    roles = dict(zip(df["token_id"], df["role"]))
    assert "drafted" in roles[info.drafted]
    assert "resampled" in roles[info.next_token]
    dist = record.dists[pos]
    row = df[df["token_id"] == info.next_token].iloc[0]
    assert row["residual"] == pytest.approx(dist.residual[dist.token_ids.index(info.next_token)])
    assert row["residual"] > 0  # the replacement comes from where p_target exceeds q_draft


def test_bonus_position_has_no_q(model_run):
    record = next(r for r in model_run.records if "bonus" in r.emitted_fates)
    info = position_info(record, record.num_drafted)
    assert info.kind == "bonus" and info.next_fate == "bonus"
    df = position_frame(record, record.num_drafted, TEXTS.__getitem__)
    assert df["q_draft"].isna().all() and "bonus" in set(df["role"])
    with pytest.raises(ValueError):
        position_info(record, len(record.dists))


HOSTILE = {
    0: "<script>alert(1)</script>",
    1: '<img src=x onerror=alert(1)>',
    2: '" onmouseover="alert(1)',
    3: " a\nb\t",
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def test_token_view_escapes_hostile_tokens(model_run):
    texts = lambda i: HOSTILE.get(i, f"t{i}")  # noqa: E731
    html = token_stream_html([texts(i) for i in range(4)], stream_frame(model_run.records, texts)) + legend_html()
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img" in html and "onerror=alert(1)&gt;" in html
    parser = _Tags()
    parser.feed(html)
    assert {tag for tag, _ in parser.tags} <= {"div", "span", "br"}
    assert all(set(attrs) <= {"style", "title", "class", "tabindex", "aria-label"} for _, attrs in parser.tags)  # no handler, no link
    shown = "".join(parser.text).replace("␣", " ")
    assert "<script>alert(1)</script>" in shown and "<img src=x onerror=alert(1)>" in shown  # text, not markup


def test_whitespace_is_visible():
    out = visible_html(" a\nb\t")
    assert "␣" in out and "↵" in out and "⇥" in out and "<br>" in out
    assert visible_html("<&>") == "&lt;&amp;&gt;"


def test_figures_build_from_frames(model_run, baseline_run):
    rounds = rounds_frame(model_run.records, "model", baseline_run.records)
    assert [t.name for t in figures.accepted_figure(rounds).data] == ["drafted", "accepted", "k asked"]
    assert len(figures.alpha_figure(rounds).data) == 2
    tpp = figures.tokens_per_target_pass_figure(rounds)
    assert list(tpp.data[0].y) == rounds["tokens_per_target_pass"].tolist()
    speed = figures.speedup_figure(rounds)
    assert list(speed.data[0].y) == pytest.approx(rounds["speedup"].tolist(), nan_ok=True)  # a round timed on a busy machine is NaN (disturbed)
    two = pd.concat([rounds_frame(model_run.records, "A"), rounds_frame(baseline_run.records, "B")], ignore_index=True)
    assert {t.name for t in figures.accepted_figure(two).data} == {"A", "B"}
    lat = pd.concat([latency_frame(model_run.records, "model"), latency_frame(baseline_run.records, "plain")], ignore_index=True)
    assert len(figures.latency_figure(lat).data) == 2
    assert len(figures.progress_figure(progress_frame(model_run.records, "model")).data) == 1


def test_inspector_figure_marks_tokens_and_escapes_labels(model_run):
    record = next(r for r in model_run.records if "rejected" in r.draft_fates)
    pos = record.draft_fates.index("rejected")
    texts = lambda i: "<b>bold</b>" if i == record.drafted[pos] else f"t{i}"  # noqa: E731
    fig = figures.inspector_figure(position_frame(record, pos, texts), position_info(record, pos))
    names = [t.name for t in fig.data]
    assert names[:3] == ["p_target", "q_draft", "residual max(0, p−q), normalised"]
    assert "&lt;b&gt;bold&lt;/b&gt;" in list(fig.data[0].x)
    notes = " ".join(a.text for a in fig.layout.annotations)
    assert "drafted" in notes and "resampled" in notes
    gauge = fig.data[-1]
    assert gauge.y[0] == pytest.approx(record.uniforms[pos])
    assert (gauge.xaxis, gauge.yaxis) == ("x2", "y2")  # the gauge sits in its own narrow column at the right
    assert fig.layout.xaxis.domain[1] < fig.layout.xaxis2.domain[0]
    assert "rejected" in fig.layout.yaxis2.title.text


def test_reference_lines_and_titles_are_drawn(model_run, baseline_run):
    rounds = rounds_frame(model_run.records, "model", baseline_run.records)
    for fig, label in ((figures.tokens_per_target_pass_figure(rounds), "plain decoding"), (figures.speedup_figure(rounds), "break-even")):
        (line,) = fig.layout.shapes
        assert (line.type, line.y0, line.y1, line.xref) == ("line", 1.0, 1.0, "x domain")
        assert [a.text for a in fig.layout.annotations] == [label]
        assert fig.layout.xaxis.title.text == "round" and fig.layout.xaxis.dtick >= 1
    assert figures.alpha_figure(rounds).layout.title.text == "running α and acceptance rate"
    assert figures.accepted_figure(rounds).layout.barmode == "overlay"


def test_viz_never_imports_streamlit():
    code = "import sys, specviz.viz, specviz.viz.figures; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_residual_is_drawn_where_p_never_exceeds_q():
    """Greedy with the target as its own drafter: p_target = q_draft (one-hot) at every drafted position, so the rule
    can never reject and verify.residual falls back to p_target; the record holds that fallback as "the residual".
    The inspector draws no residual bar there (the old one drew p_target's bar at 1.0 and called it the residual)."""
    same = run(ModelDrafter(BigramLM(0), SamplingConfig(temperature=0.0)), temperature=0.0, max_new=12)
    record = next(r for r in same.records if r.num_drafted)
    info = position_info(record, 0)
    assert info.fate == "accepted" and info.residual_needed is False
    assert record.dists[0].residual is not None and max(record.dists[0].residual) == pytest.approx(1.0)  # the fallback
    df = position_frame(record, 0, TEXTS.__getitem__)
    assert df["residual"].isna().all()
    names = [t.name for t in figures.inspector_figure(df, info).data]
    assert not any(n and n.startswith("residual") for n in names)


def test_a_residual_with_mass_is_still_drawn(model_run):
    record = next(r for r in model_run.records if "rejected" in r.draft_fates)
    pos = record.draft_fates.index("rejected")
    assert position_info(record, pos).residual_needed is True


def test_the_inspector_opens_on_the_latest_round_that_drafted_and_finds_the_last_rejection():
    from types import SimpleNamespace as R

    from specviz.viz.frames import last_rejection_round, latest_drafting_round

    records = [R(num_drafted=3, draft_fates=("accepted", "rejected", "discarded")), R(num_drafted=2, draft_fates=("accepted",) * 2), R(num_drafted=0, draft_fates=())]
    assert latest_drafting_round(records) == 1 and last_rejection_round(records) == 0
    assert latest_drafting_round(records[2:]) == 0 and last_rejection_round(records[1:]) is None


def test_the_u_label_is_dark_on_white(model_run):
    from specviz.viz import style

    record = next(r for r in model_run.records if "accepted" in r.draft_fates)
    pos = record.draft_fates.index("accepted")
    fig = figures.inspector_figure(position_frame(record, pos, TEXTS.__getitem__), position_info(record, pos))
    (u,) = [a for a in fig.layout.annotations if a.text.startswith("u = ")]
    assert (u.font.color, u.bgcolor) == (style.INK, style.PAPER)


def role_boxes(fig, spacing: float) -> list[tuple[str, float, float, float, float]]:
    """Each drafted / emitted name's box (left, right, top, bottom) in pixels around the point it marks, with the bars
    `spacing` px apart: centred at the arrow's tail (ax, ay from the bar), sized conservatively (every character as
    wide as 0.65 of the font size, a line 1.5 font sizes tall, plus the border)."""
    x_labels = list(fig.data[0].x)
    boxes = []
    for a in fig.layout.annotations:
        if a.xref != "x" or not a.showarrow:
            continue
        size = a.font.size or 12
        plain = a.text.replace("<b>", "").replace("</b>", "")
        half_w, half_h = (len(plain) * 0.65 * size + 6) / 2, (1.5 * size + 6) / 2
        cx, cy = x_labels.index(a.x) * spacing + a.ax, a.ay
        boxes.append((plain, cx - half_w, cx + half_w, cy - half_h, cy + half_h))
    return boxes


@pytest.mark.parametrize("emitted_first", [True, False], ids=["resampled left of drafted", "drafted left of resampled"])
def test_the_drafted_and_resampled_names_never_overlap(emitted_first):
    """Adjacent bars (the resampled token right beside the drafted one, on either side) at any bar spacing a chart
    can have: the two names' boxes do not meet (they once sat at one height, leaning into each other)."""
    from specviz.viz.frames import PositionInfo

    roles = ["resampled", "drafted", "", ""] if emitted_first else ["", "drafted", "resampled", ""]
    position = pd.DataFrame({
        "token_id": [0, 1, 2, 3], "token": ["␣river", "␣cat", "␣dog", "␣mat"], "p_target": [0.6, 0.1, 0.2, 0.1],
        "q_draft": [0.1, 0.8, 0.05, 0.05], "residual": [0.8, 0.0, 0.15, 0.05], "role": roles,
    })  # fmt: skip
    info = PositionInfo(1, "draft", 1, "rejected", 0.1, 0.8, 0.125, 0.6, 0 if emitted_first else 2, "resampled")
    fig = figures.inspector_figure(position, info)
    for spacing in range(0, 201, 5):  # px between neighbouring bars' centres: a phone's crowded chart to a wide one
        boxes = role_boxes(fig, spacing)
        (name1, l1, r1, t1, b1), (name2, l2, r2, t2, b2) = boxes
        assert {name1, name2} == {"drafted", "resampled"}
        assert min(r1, r2) <= max(l1, l2) or min(b1, b2) <= max(t1, t2), f"the names overlap with bars {spacing} px apart: {boxes}"
