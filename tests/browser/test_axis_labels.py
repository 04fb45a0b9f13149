"""No overlapping or runaway axis labels on the theory, exactness, numerics, benchmark and race pages (issue 43,
point 9: a theory chart's B axis once ran to 17,179,869,184 with about 30 labels). Every figure those pages build
(specviz.viz) is drawn by plotly.js in Chromium, from the shipped tables and realistic inputs, at a laptop column's
width and a phone's; then each axis's drawn tick labels are counted, their boxes checked for overlaps, and a log
axis's range checked against the data it draws (the runaway axis was stretched by a label placed in the wrong units)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

WIDTHS = {"laptop": 700, "phone": 360}  # a chart's width in CSS pixels: a wide column, a phone's screen
MAX_LABELS = 12  # per axis
SLACK_DECADES = 1.0  # how far a log axis may reach beyond its traces' values (padding, a threshold line, a label)


def theory_figures() -> dict[str, go.Figure]:
    from specviz.experiments.cost_profile import shipped_profiles
    from specviz.ui.labs import theory as lesson
    from specviz.viz import bench, theory

    profiles = {f"shipped: {p.name}": p for p in shipped_profiles().values()}
    curve = next(iter(profiles.values())).curve
    measured = bench.measured_points(pd.read_csv("assets/bench_cpu.csv"))
    c, alpha, k = 0.05, 0.7, 4
    heatmap = theory.heatmap_base(c, curve, measured)
    heatmap.add_trace(theory.choice_marker(alpha, k, c, curve))
    out = {
        "theory heatmap": heatmap,
        "theory curves": theory.curves_figure(c, curve, (1, 2, 4, 8), alpha, measured),
        "theory speedup vs k": theory.speedup_vs_k_figure(alpha, c, curve, k),
        "theory verify cost": theory.verify_curve_figure({p.name: p.curve for p in profiles.values()}, constant=1.6),
        "theory alpha definitions": theory.alpha_definitions_figure(),
    }
    batch = lesson.batch_lesson(None, profiles, alpha, k, c)
    if batch is not None:
        out["theory batch throughput"] = theory.batch_throughput_figure(batch.frame)
        out["theory batch ratio"] = theory.batch_ratio_figure(batch.ratios, batch.crossover)
    drafting = lesson.drafting_lesson(None, profiles, alpha)
    if drafting is not None:
        out["theory drafting cost"] = go.Figure(drafting.figure)
    return out


def exactness_figures() -> dict[str, go.Figure]:
    from specviz.core.toy import run_toy
    from specviz.viz.lab import (
        convergence_figure,
        convergence_frame,
        histogram_figure,
        real_frame,
        real_histogram_figure,
        toy_frame,
    )

    p, q = torch.tensor([0.5, 0.3, 0.15, 0.05]), torch.tensor([0.2, 0.2, 0.3, 0.3])
    toy = run_toy(p, q, 100_000, seed=0)
    names = ["Paris", "Lyon", "the", "a"]
    out = {
        "exactness histogram": histogram_figure(toy_frame(names, p.tolist(), q.tolist(), toy.counts[-1].tolist(), toy.limit.tolist()), "100,000 emitted tokens"),
        "exactness convergence": convergence_figure(convergence_frame(toy.checkpoints, toy.tv.tolist(), toy.pvalues.tolist(), toy.noise.tolist())),
    }
    rng = np.random.default_rng(0)
    p_real = rng.dirichlet(np.ones(12))
    counts = rng.multinomial(2000, p_real)
    out["exactness real histogram"] = real_histogram_figure(
        real_frame([f"tok{i}" for i in range(11)] + ["(other)"], p_real.tolist(), rng.dirichlet(np.ones(12)).tolist(), counts.tolist(), counts.tolist()), "2,000 samples"
    )
    return out


def numerics_figures() -> dict[str, go.Figure]:
    from specviz.viz.numerics import invariance_figure, pass_diff_figure

    rng = np.random.default_rng(0)
    rows = []
    for dtype, scale in (("float32", 1e-6), ("bfloat16", 3e-2), ("float16", 4e-3)):
        for position in range(48):
            diff = 0.0 if dtype == "float32" and position % 3 == 0 else scale * rng.uniform(0.1, 3)  # exact zeros are clipped at 1e-9
            margin = rng.uniform(0.01, 12)
            rows.append((dtype, position, diff, margin, diff > margin))
    diffs = pd.DataFrame(rows, columns=["dtype", "position", "max_abs_diff", "margin", "flipped"])
    report = SimpleNamespace(pass_diffs=diffs, k=4)
    return {"numerics pass differences": pass_diff_figure(report), "numerics invariance": invariance_figure(report)}


def benchmark_figures() -> dict[str, go.Figure]:
    from specviz.viz import bench

    out = {}
    for table in ("bench_cpu", "bench_trees_cpu"):
        frame = pd.read_csv(f"assets/{table}.csv")
        out[f"benchmark {table} speedup vs k"] = bench.speedup_vs_k_figure(frame)
        out[f"benchmark {table} theory overlay"] = bench.theory_overlay_figure(frame)
    return out


def race_figures() -> dict[str, go.Figure]:
    from specviz.core.race import RaceResult, lane_of
    from specviz.viz.race import burst_size_figure, gap_histogram, gap_series

    rng = np.random.default_rng(0)
    plain_times = np.cumsum(rng.uniform(0.04, 0.07, 64)).tolist()
    plain = lane_of("plain decoding", plain_times, [[i] for i in range(64)], 0.05)
    sizes = rng.integers(1, 6, 20).tolist()
    bursts, at = [], 0
    for size in sizes:
        bursts.append(list(range(at, at + size)))
        at += size
    spec = lane_of("prompt lookup, k=4", np.cumsum(rng.uniform(0.05, 0.09, len(sizes))).tolist(), bursts, 0.05)
    race = RaceResult("p", (1,), "t", "float32", "lookup", "prompt lookup, k=4", 4, 0.0, 0, 4, plain, spec, {i: str(i) for i in range(at)})
    return {"race gaps": gap_histogram(gap_series(race), 0.001, "Gaps between consecutive tokens"), "race burst sizes": burst_size_figure(sizes)}


def all_figures() -> dict[str, go.Figure]:
    return theory_figures() | exactness_figures() | numerics_figures() | benchmark_figures() | race_figures()


AXES_JS = """
const gd = document.getElementById('chart'), out = {};
for (const [name, ax] of Object.entries(gd._fullLayout)) {
  if (!/^[xy]axis\\d*$/.test(name) || !ax.visible) continue;
  const id = ax._id;  // x, y, x2, ...
  const boxes = [...gd.querySelectorAll(`g.${id}tick text`)].filter(t => t.textContent.trim())
    .map(t => { const r = t.getBoundingClientRect(); return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom}; });
  const values = gd._fullData.filter(t => t.visible !== false && t[`${id[0]}axis`] === id)
    .flatMap(t => Array.from(t[id[0]] ?? [])).map(Number).filter(v => v > 0).map(Math.log10);
  const data = values.length ? [Math.min(...values), Math.max(...values)] : null;  // log10 of the drawn values
  out[name] = {type: ax.type, range: ax.range, labels: boxes, data: data};
}
return out;
"""


def overlaps(labels: list[dict]) -> list[tuple[str, str]]:
    """Pairs of tick labels whose boxes intersect by more than a pixel each way."""
    return [
        (a["text"], b["text"])
        for i, a in enumerate(labels)
        for b in labels[i + 1 :]
        if min(a["right"], b["right"]) - max(a["left"], b["left"]) > 1 and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 1
    ]


@pytest.fixture(scope="module")
def plotly_js(tmp_path_factory) -> str:
    from plotly.offline import get_plotlyjs

    path = tmp_path_factory.mktemp("plotly") / "plotly.min.js"
    path.write_text(get_plotlyjs())
    return path.as_uri()


def axis_problems(driver, plotly_js: str, folder, name: str, fig: go.Figure, width: int, counts: dict[str, int]) -> list[str]:
    """Draw one figure at width px in Chromium and say what is wrong with its axes' labels; counts gets each axis's
    number of tick labels."""
    from selenium.webdriver.support.ui import WebDriverWait

    page = folder / "chart.html"
    page.write_text(
        f"<html><body style='margin:0'><div id='chart' style='width:{width}px;height:{fig.layout.height or 450}px'></div>"
        f"<script src='{plotly_js}'></script><script>const f = {fig.to_json()};"
        "Plotly.newPlot('chart', f.data, f.layout, {displayModeBar: false}).then(() => { window.drawn = true; });</script></body></html>"
    )
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return window.drawn === true;"))
    problems = []
    for axis, info in driver.execute_script(AXES_JS).items():
        labels = info["labels"]
        counts[f"{name} {axis}"] = len(labels)
        if len(labels) > MAX_LABELS:
            problems.append(f"{name} {axis}: {len(labels)} tick labels: {[t['text'] for t in labels]}")
        if clash := overlaps(labels):
            problems.append(f"{name} {axis}: labels overlap: {clash[:4]}")
        if info["type"] == "log" and info["data"]:
            (lo, hi), (data_lo, data_hi) = sorted(info["range"]), info["data"]
            if lo < data_lo - SLACK_DECADES or hi > data_hi + SLACK_DECADES:
                problems.append(f"{name} {axis}: a log axis over 10^{lo:.1f}..10^{hi:.1f} for values in 10^{data_lo:.1f}..10^{data_hi:.1f}")
    return problems


@pytest.mark.parametrize("width", list(WIDTHS))
def test_no_axis_has_overlapping_or_runaway_labels(driver, plotly_js, tmp_path, width):
    figures = all_figures()
    assert len(figures) >= 18, sorted(figures)  # every page's charts, not a silent few
    counts: dict[str, int] = {}
    problems = [p for name, fig in figures.items() for p in axis_problems(driver, plotly_js, tmp_path, name, fig, WIDTHS[width], counts)]
    print(f"{width}: {len(figures)} figures, {len(counts)} axes, at most {max(counts.values())} tick labels on one axis")
    assert problems == [], "\n".join(problems)


def test_the_check_sees_the_old_runaway_batch_axis(driver, plotly_js, tmp_path):
    """The bug of issue 43's point 9, put back by hand: a label at x = B on the log B axis (not log10 B) stretches it."""
    from specviz.viz.theory import batch_ratio_figure

    ratios = pd.DataFrame({"source": "predicted", "batch_size": [1, 2, 4, 8, 16, 32, 64], "ratio": [2.0, 1.8, 1.5, 1.2, 1.0, 0.8, 0.6]})
    fig = batch_ratio_figure(ratios, 16.0)
    fig.update_layout(xaxis=dict(range=None, tickvals=None, ticktext=None, autorange=True))
    fig.add_annotation(x=10.2, xref="x", y=0.5, yref="y domain", text="B ≈ 10.2", showarrow=False)
    problems = axis_problems(driver, plotly_js, tmp_path, "old batch ratio", fig, WIDTHS["laptop"], {})
    assert any("log axis over" in p for p in problems), problems
