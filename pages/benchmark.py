"""Benchmark: on code, prose, copying and Q&A, how fast is each drafter really, measured against plain decoding?"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from specviz.config import EMBEDDED_TARGET
from specviz.core.limits import MAX_DRAFT_TOKENS, SEED_UI_MAX
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.experiments.bench import SweepSpec
from specviz.ui.common import access, widgets
from specviz.ui.common.keys import BENCH_RESULTS_KEY
from specviz.ui.common.navigation import route_through_app
from specviz.ui.labs.benchmark import (
    BENCH_DRAFTERS,
    acceptance_histograms,
    auto_k_rounds,
    bench_prompts,
    check_draft_model,
    chosen_prompts,
    drafter_defaults,
    run_bench,
    shipped_table,
    summary,
    trees_vs_chains,
)
from specviz.ui.room.lesson import checklist
from specviz.viz.bench import SPEEDUP_METRICS, column_label, has_trees, speedup_vs_k_figure, theory_overlay_figure
from specviz.viz.markdown import md_text

route_through_app()  # a fresh server's first request may land here without app.py

SHIPPED_TABLE = Path(__file__).resolve().parent.parent / "assets" / "bench_cpu.csv"
TEMPERATURES = (0.0, 0.5, 1.0, 1.5)
NUMBER_FORMATS = {
    "alpha": "%.2f", "acceptance_rate": "%.2f", "alpha_implied": "%.2f", "tokens_per_target_pass": "%.2f", "tokens_per_s": "%.1f",
    "baseline_tokens_per_s": "%.1f", "speedup": "%.2f×", "speedup_low": "%.2f×", "speedup_high": "%.2f×", "speedup_cpu": "%.2f×",
    "speedup_cpu_low": "%.2f×", "speedup_cpu_high": "%.2f×", "cpu_s": "%.2f", "baseline_cpu_s": "%.2f", "draft_cost": "%.2f", "verify_cost": "%.2f", "predicted_speedup": "%.2f×",
    "wall_s": "%.2f", "baseline_wall_s": "%.2f",
}


def columns(frame: pd.DataFrame) -> dict:
    """Plain-word headers for a results table, with each number's format."""
    return {
        c: st.column_config.NumberColumn(column_label(c), format=NUMBER_FORMATS[c]) if c in NUMBER_FORMATS else st.column_config.Column(column_label(c))
        for c in frame.columns
    }  # fmt: skip


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def show_results(frame: pd.DataFrame, name: str) -> None:
    """Table, charts and downloads for one results frame."""
    metrics = [m for m in SPEEDUP_METRICS if m in frame]
    metric = widgets.radio(
        "speedup measured by", metrics, format_func=SPEEDUP_METRICS.get, horizontal=True, key=f"{name}_metric",
        help="Wall clock is what a user waits. Process CPU time ignores time stolen by other programs on a busy machine.",
    )
    st.subheader("Mean over prompts")
    st.caption(
        "Each speedup is the median over repeats of a run's tokens/s divided by the baseline's in the same rotation; "
        "low and high are the smallest and largest of those ratios. A verify cost near or above 1 is expected: a pass over k+1 tokens is never cheaper than one over 1."
    )
    table = summary(frame)
    st.dataframe(table, hide_index=True, column_config=columns(table))
    if has_trees(frame):
        st.subheader("Token trees against chains at the same node budget k")
        st.caption(
            "W is the tree width (children per node; 1 = a chain). Look at tokens per pass: a tree survives a miss on the first "
            "guess, so it should rise with W; whether the speedup follows depends on what the wider verify pass costs (verify cost)."
        )
        trees = trees_vs_chains(frame)
        st.dataframe(trees, hide_index=True, column_config=columns(trees))
    st.plotly_chart(speedup_vs_k_figure(frame, metric), width="stretch")
    st.caption(
        "Above the dotted line speculation pays. Whiskers span the lowest and highest ratio over repeats and prompts; "
        "compare drafters within a category: copying is where prompt lookup earns its keep."
    )
    st.plotly_chart(theory_overlay_figure(frame, metric), width="stretch")
    st.caption(
        "Lines: the formula at each drafter's measured draft cost c and verify cost; dots: measured runs. Dots below their "
        "line lose time the formula ignores (prefill, bookkeeping, rounds that draft fewer than k)."
    )
    acceptance_histograms(frame, name)
    with st.expander(f"Every run ({len(frame)} rows)"):
        shown = frame if has_trees(frame) else frame.drop(columns=["tree_width"], errors="ignore")
        st.dataframe(shown, hide_index=True, column_config=columns(shown))
    d1, d2 = st.columns(2)
    d1.download_button("Download CSV", frame.to_csv(index=False), file_name=f"{name}.csv", mime="text/csv", key=f"{name}_csv")
    d2.download_button("Download JSON", frame.to_json(orient="records", indent=1), file_name=f"{name}.json", mime="application/json", key=f"{name}_json")


policy = access.current_policy(report=True)
st.title("Benchmark")
st.caption("On code, prose, copying and Q&A, how fast is each drafter really, measured against plain decoding?")
checklist(__file__)  # this page's lesson task, if any (docs/lesson-45min.md)

try:
    all_prompts, all_categories = bench_prompts()
except ValueError as exc:
    st.error(md_text(exc))
    st.stop()

with st.sidebar:
    st.subheader("Sweep")
    categories = widgets.multiselect("categories", all_categories, default=["copy"], key="bench_categories")
    per_category = widgets.slider("prompts per category", 1, 5, 1, key="bench_per_category")
    drafters = widgets.multiselect("drafters", BENCH_DRAFTERS, default=["lookup"], key="bench_drafters")
    k_options = list(range(1, min(MAX_DRAFT_TOKENS, policy.max_draft_tokens) + 1))
    forced_ks = widgets.held("bench_ks", [])
    if isinstance(forced_ks, list) and any(k not in k_options for k in forced_ks):
        access.limited(f"k is limited to {max(k_options)} on this server.")
        st.session_state["bench_ks"] = [k for k in forced_ks if k in k_options]
    ks = widgets.multiselect("k values", k_options, default=[k for k in (2, 4) if k in k_options], key="bench_ks")
    tree_widths = widgets.multiselect(
        "tree widths (1 = a chain)", list(range(1, MAX_TREE_WIDTH + 1)), default=[1], key="bench_tree_widths",
        help="Children per node of a token tree; k is the node budget. Prompt lookup drafts chains whatever the width.",
    )  # fmt: skip
    temperatures = widgets.multiselect("temperatures (0 = greedy)", TEMPERATURES, default=[0.0], key="bench_temperatures", format_func=lambda t: f"{t:g}")
    new_cap = max(8, min(128, policy.max_new_tokens))
    access.refuse_above("bench_max_new_tokens", new_cap, "max new tokens")
    max_new_tokens = widgets.slider("max new tokens", 8, new_cap, min(32, new_cap), 8, key="bench_max_new_tokens")
    repeats = widgets.slider("repeats", 1, 5, SweepSpec.repeats, key="bench_repeats", help="Every setting and its baseline run this many times, interleaved, after one discarded warm-up; the table shows medians.")
    seed = widgets.number_input("seed", 0, SEED_UI_MAX, value=0, key="bench_seed")
    with st.expander("Models"):
        target_source = access.model_choice("bench_target", "target: hub id, local folder or .gguf", EMBEDDED_TARGET) or policy.default_target
        draft_source = access.model_choice("bench_draft", "draft model (for the 'model' drafter)", "", draft=True)
        device = access.device_choice("bench_device")
        chat = widgets.toggle("chat template", value=True, key="bench_chat")

chosen = chosen_prompts(all_prompts, categories, int(per_category))
try:
    spec = SweepSpec(tuple(drafters), tuple(sorted(ks)), tuple(sorted(temperatures)), int(max_new_tokens), int(seed), bool(chat), repeats=int(repeats),
                     tree_widths=tuple(sorted(int(w) for w in tree_widths)))
    if not chosen:
        raise ValueError("Choose at least one category.")
    check_draft_model(drafters, draft_source)
except ValueError as exc:
    st.info(md_text(exc))
    spec = None

if spec is not None:
    runs = spec.num_runs(len(chosen))
    st.markdown(
        f"**{plural(len(chosen), 'prompt')} × {plural(len(spec.temperatures), 'temperature')} × (1 baseline + "
        f"{plural(len(spec.drafters), 'drafter')} × {len(spec.ks)} k × {plural(len(spec.tree_widths), 'tree width')}) × ({spec.warmup} warm-up + {plural(spec.repeats, 'repeat')}) = {plural(runs, 'run')}** "
        f"of up to {spec.max_new_tokens} new tokens each. For each prompt and temperature the baseline and every setting run in a rotating order; "
        "every speedup divides a run's tokens/s by the tokens/s of plain decoding of the same prompt, sampling and seed in the same rotation."
    )
    if runs > policy.max_runs:
        access.limited(f"This sweep is {runs} runs; this server allows {policy.max_runs} per sweep. Choose fewer prompts, drafters, k values, tree widths or temperatures.")
    elif runs > 120:
        st.warning("That is a long sweep on a CPU; the command line runs the same sweep headless: `python -m specviz bench`.")
    help_text = (
        "Every run takes the model as one turn (a long run gives it back about every second, between rounds), so on a "
        "shared server other people's Steps go in between: they stay quick and the sweep takes a little longer. Timings "
        "count only the time inside the turns. One long job per participant at a time."
    )
    if st.button("Run benchmark", type="primary", key="bench_run", disabled=runs > policy.max_runs, help=help_text):
        try:
            bar = st.progress(0.0, text="warming up…")
            frame = run_bench(
                target_source, draft_source, device, chosen, spec,
                on_progress=lambda done, total, message: bar.progress(done / total, text=f"\\[{done}/{total}\\] {md_text(message)}"),
            )
            bar.empty()
            st.session_state[BENCH_RESULTS_KEY] = frame
        except ValueError as exc:
            st.error(md_text(exc))

def shipped() -> None:
    """The table measured earlier and shipped with specviz: always shown, beside this session's sweep when there is one."""
    st.caption(
        "The table shipped in assets/bench_cpu.csv, from `python -m specviz bench` with the embedded SmolLM2-135M target: "
        "medians of 3 interleaved repeats after a discarded warm-up, on one thread. A sweep you run here goes in its own tab beside it."
    )
    try:
        show_results(shipped_table(SHIPPED_TABLE), "bench_cpu")
    except (ValueError, KeyError) as exc:
        st.error(f"Could not read {SHIPPED_TABLE.name}: {md_text(exc)}")
    st.subheader("Each drafter's defaults: its measured best here")
    st.dataframe(drafter_defaults(), hide_index=True)
    st.caption(
        "What the sidebar and `generate` start each drafter at, unless you set the value: the setting with the best worst "
        "speedup on open text (prose) in these tables and the drafting table (assets/drafting_cpu.json), derived by "
        "scripts/drafter_defaults.py (docs/benchmarks.md, *Each drafter's defaults*)."
    )
    st.subheader("k: auto, round by round")
    auto_k_rounds()


results = st.session_state.get(BENCH_RESULTS_KEY)
mine = isinstance(results, pd.DataFrame) and not results.empty
if mine:
    tabs = st.tabs(["This session's sweep", "Measured earlier on a 2-core CPU"] if SHIPPED_TABLE.is_file() else ["This session's sweep"])
    with tabs[0]:
        st.caption("Other processes on the machine share the CPU, so tokens/s are noisy: run a sweep twice before trusting a 10% difference.")
        show_results(results, "specviz_bench")
        st.caption("These runs also appear on the Speedup theory page, drawn on the curves.")
    if len(tabs) > 1:
        with tabs[1]:
            shipped()
elif SHIPPED_TABLE.is_file():
    st.header("Measured earlier on a 2-core CPU")
    shipped()
