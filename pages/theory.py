"""Speedup theory: for a given acceptance rate and draft cost, how much faster can it be, and which k is best?"""

from __future__ import annotations

import streamlit as st

from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.theory import VerifyCurve
from specviz.experiments.cost_profile import CostProfile
from specviz.ui.common import access, widgets
from specviz.ui.common.navigation import page_link, route_through_app
from specviz.ui.labs.batch import BatchMeasurement, batch_plan, measure_batches_here
from specviz.ui.labs.measured import session_points
from specviz.ui.labs.theory import (
    MEASURED_KEY,
    NO_AUTO_RUN,
    THIS_MACHINE,
    BatchLesson,
    alpha_definitions,
    auto_choices,
    batch_lesson,
    cost_label,
    curves,
    drafting_lesson,
    examples_by_setting,
    heatmap,
    last_run_alpha,
    measure_this_machine,
    overlay_points,
    profile_table,
    profiles,
    theory_numbers,
    verify_curves,
    worked_examples,
)
from specviz.ui.room.lesson import checklist
from specviz.viz.markdown import md_text
from specviz.viz.theory import batch_ratio_figure, batch_throughput_figure, speedup_vs_k_figure, verify_label

route_through_app()  # a fresh server's first request may land here without app.py

SOURCE_KEY = "theory_verify_source"
SELECT_MEASURED_KEY = "theory_select_measured"  # set by the button: choose the new measurement on the next run
BATCH_MEASURED_KEY = "theory_batch_measured"  # this session's `specviz batch` points (a BatchMeasurement)
CONSTANT = "one constant (the slider)"


st.title("Speedup theory")
st.caption("For a given acceptance rate and draft cost, how much faster can speculative decoding be, and which k is best?")
checklist(__file__)  # this page's lesson task, if any (docs/lesson-45min.md)

with st.sidebar:
    st.subheader("Theory inputs")
    alpha = widgets.slider("α: chance a drafted token is accepted", 0.0, 1.0, 0.7, 0.01, key="theory_alpha")
    k = widgets.slider("k: tokens drafted per round", 1, MAX_DRAFT_TOKENS, 4, key="theory_k")
    c = widgets.slider(
        "c: one draft forward ÷ one target forward", 0.0, 1.0, 0.05, 0.01, key="theory_c",
        help="0 for prompt lookup; about 0.05 for a draft model ~20× smaller; ~0.93 for an early exit at 28 of 30 layers.",
    )
    available = profiles()
    if st.session_state.pop(SELECT_MEASURED_KEY, False) and THIS_MACHINE in available:
        st.session_state[SOURCE_KEY] = THIS_MACHINE  # before the widget is drawn, so it shows the new curve
    source = widgets.selectbox(
        "verify cost c_verify(k)", [CONSTANT, *available], key=SOURCE_KEY,
        help="A measured profile charges each k what a (k+1)-token pass really cost on that machine; the constant charges every k the same.",
    )
    constant = widgets.slider(
        "constant verify cost: a (k+1)-token target pass ÷ a 1-token pass", 1.0, 3.0, 1.0, 0.05, key="theory_verify_cost",
        disabled=source != CONSTANT,
        help="About 1 on a GPU, where a pass is limited by reading the weights. On a 2-core CPU, 5 tokens measured about 1.7 (assets/profile_cpu.json).",
    )
    profile = available.get(source)
    verify_cost: float | VerifyCurve = profile.curve if profile is not None else constant
    measured_c = profile.draft_cost if profile is not None else {}
    if measured_c:
        c_source = widgets.selectbox("c from", ["the slider", *measured_c], key="theory_c_source", format_func=lambda n: n if n == "the slider" else f"{cost_label(n)} (measured)",
                                     help="A drafter's measured cost per drafted token in this profile, in 1-token passes.")  # fmt: skip
        if c_source in measured_c:
            c = measured_c[c_source]
            st.caption(f"c = {c:.3f}: {md_text(cost_label(c_source))}, measured in this profile.")
    show_measured = widgets.toggle("overlay this session's measured runs", value=True, key="theory_show_measured")

numbers = theory_numbers(alpha, k, c, verify_cost)
tokens, gain, kb, gain_best = numbers.expected_tokens, numbers.speedup, numbers.best_k, numbers.best_speedup

cols = st.columns(4)
cols[0].metric("tokens per target pass", f"{tokens:.2f}", help="(1 − α^(k+1)) / (1 − α); k + 1 when α = 1")
cols[1].metric("cost of a round", f"{numbers.round_cost:.2f}", help=f"c_verify(k) + k·c, in 1-token target passes; c_verify({k}) = {numbers.verify_cost:.2f}")
cols[2].metric("expected speedup", f"{gain:.2f}×", delta=f"{gain - 1:+.2f} vs plain")
cols[3].metric("best k", f"{kb}", help=f"speedup at k = {kb}: {gain_best:.2f}×")
st.latex(r"\text{speedup} = \frac{1-\alpha^{k+1}}{(1-\alpha)\,(c_\text{verify}(k) + k\,c)}")
if gain_best <= 1.0:
    st.warning(
        f"No k from 1 to {MAX_DRAFT_TOKENS} beats plain decoding here (the best is {gain_best:.2f}× at k = {kb}). "
        "Raise α, or make the draft (c) or the verify pass cheaper."
    )

measured = overlay_points(show_measured)

st.plotly_chart(heatmap(c, verify_cost, alpha, k, measured), width="stretch")
st.caption(
    "Blue beats plain decoding, red loses to it; the black line is break-even and the yellow steps (outlined) are the best k for "
    "each α. Measured runs sit at their (α, k); compare their own speedup (hover) with the colour underneath."
)

left, right = st.columns(2)
with left:
    ks = sorted({1, 2, 4, 8, 16, k})
    st.plotly_chart(curves(c, verify_cost, ks, alpha, measured), width="stretch")
    st.caption(f"Each curve is one k at your c and verify cost ({verify_label(verify_cost)}); white markers are measured speedups at their α.")
with right:
    auto = auto_choices()  # what k: auto chose in this session's step-through run, drawn on the same bars
    st.plotly_chart(speedup_vs_k_figure(alpha, c, verify_cost, k, chosen=None if auto is None else auto.counts), width="stretch")
    st.caption("Yellow: the best k; blue: yours. More drafts pay only while the next one is still likely to survive.")
    if auto is None:
        st.caption(NO_AUTO_RUN)
    else:
        st.caption(md_text(auto.caption))
        page_link("pages/step_through.py", "Back to its rounds: each one's reason in the round inspector")

if not measured.empty:
    with st.expander(f"Measured runs drawn above ({len(measured)})"):
        st.dataframe(measured, hide_index=True, column_config={"speedup": st.column_config.NumberColumn(format="%.2f×"), "alpha": st.column_config.NumberColumn(format="%.2f")})
elif show_measured:
    st.caption("No measured runs in this session yet: step through a run, or run the Benchmark page, and they appear here.")

st.header("What a verify pass costs on this machine")
st.markdown(
    "The formula charges a round one target pass over k + 1 tokens. Whether that costs one 1-token pass or several "
    "decides whether speculation pays. **Measure this machine** times the embedded model's passes over 1 to 17 new "
    "tokens after 256 cached ones (medians of interleaved repeats after a warm-up) and each offline drafter's cost per "
    "drafted token; the measured curve then appears in the *verify cost* menu in the sidebar, beside the profiles shipped in `assets/`."
)
shared = access.current_policy().shared
measure_help = (
    "About a minute on a small CPU" + (" (one repeat per pass on this shared server)" if shared else "") + ". Each "
    "measurement takes the model as one turn, so other sessions' rounds run between measurements, never during one; "
    "a busy machine still makes the timings noisier."
)
if st.button("Measure this machine", key="theory_measure", help=measure_help):
    bar = st.progress(0.0, text="loading the embedded model…")
    try:
        mine = measure_this_machine(lambda done, total, what: bar.progress(done / total, text=f"{what} ({done}/{total})"))
    except (ValueError, RuntimeError) as exc:  # a model that will not load says what to do; OOM is a RuntimeError
        bar.empty()
        st.error(f"Could not measure: {md_text(exc)}")
    else:
        st.session_state[MEASURED_KEY] = mine
        st.session_state[SELECT_MEASURED_KEY] = True
        st.rerun()

shown = profiles()
if shown:
    st.plotly_chart(verify_curves({name: prof.curve for name, prof in shown.items()}, constant if profile is None else None), width="stretch")
    st.caption(
        "Read the slope. On a CPU a pass is bound by arithmetic, which grows with the tokens fed, so c_verify(k) climbs "
        "with k and every extra draft must pay for its share of a longer pass. On a GPU a pass over a few tokens is bound by "
        "reading the weights from memory once, so the curve stays nearly flat near 1 and drafting more is almost free to verify. "
        "Points past the measured k are extrapolated along the last step."
    )
    table = profile_table(shown, alpha, c)
    st.dataframe(table, width="stretch")
    st.caption(
        "Profiles side by side; c is a drafter's cost per drafted token in 1-token target passes (set the c slider to one "
        "of them); \"not measured yet\" marks a drafter newer than the profile. For Medusa heads c is one call of the K heads and "
        "one LM-head read over their K rows, divided by the K tokens it drafts. The CPU profiles are the same model at fp16-weights (the CPU default: float16 weights, float32 math) and at "
        "float32: compare their slopes. A GPU profile goes beside them: `python -m specviz profile --device cuda --out assets/profile_gpu.json`."
    )

st.header("Why drafting cost decides speculation on a small model")
lesson = drafting_lesson(profile, available, alpha)
if lesson is None:
    st.info("No profile here timed a drafter over a draft vocabulary yet: `python -m specviz profile --out profile.json` times the Medusa heads and the EAGLE head over the full vocabulary and over 8,192 tokens, when their token counts are installed.")
else:
    st.plotly_chart(lesson.figure, width="stretch")
    st.caption(md_text(lesson.caption))

st.header("Where the formula comes from")
st.markdown(
    f"""
Treat every drafted token as accepted with the same probability α, independently. A round keeps a run
of drafts that ends at the first rejection, and always adds one token of its own: the replacement drawn
at the rejection, or a bonus token from the target when all k drafts survive. So a round keeps *i* drafts
with probability α^i(1 − α) for i < k and α^k for i = k, and emits on average
1 + α + α² + … + α^k = (1 − α^(k+1)) / (1 − α) tokens: at your settings, **{tokens:.2f}**.

Plain decoding pays one 1-token target pass per token. A speculative round pays k draft forwards
(k·c) and one target pass over k + 1 positions (the verify cost). On a GPU that pass is limited by
reading the weights, so it costs about the same as a 1-token pass; on a CPU arithmetic dominates and
the pass grows with k: pick a measured profile in the sidebar and the charts charge each k its own c_verify(k).
"""
)

st.header("Two numbers called α")
st.markdown(
    """
* **Leviathan's α** is a property of the two distributions. At one position, a token drawn from q_draft
  survives with probability Σ_v q(v)·min(1, p(v)/q(v)) = Σ_v min(p_target(v), q_draft(v)): the overlap of the
  two histograms. α is that overlap averaged over positions. It does not depend on k.
* **accepted / drafted** is a count: kept drafts over every drafted token, including the ones thrown away
  unexamined after the first rejection. This is the acceptance rate vLLM and llama.cpp print.

Under the independence assumption above a round keeps α(1 − α^k)/(1 − α) drafts out of k, so
accepted/drafted = α(1 − α^k) / (k(1 − α)). The two agree at k = 1 and drift apart as k grows: a
drafter with α = 0.8 shows about 0.59 accepted/drafted at k = 4 and 0.42 at k = 8. Tokens per target pass
is 1 + k·(accepted/drafted) either way. The benchmark reports both, plus the α that its accepted/drafted
implies; real text breaks the independence assumption (acceptances come in streaks while the model copies),
and prompt lookup often drafts fewer than k tokens, so the implied α is an estimate.
"""
)
st.plotly_chart(alpha_definitions(), width="stretch")
st.caption("Read across at one α: the larger k, the lower the accepted/drafted a dashboard will show for the same drafter.")
st.markdown(f"At your settings: α = {alpha:.2f} and k = {k} give accepted/drafted ≈ **{numbers.acceptance_rate:.2f}**.")

st.header("Worked examples")
examples = worked_examples()
st.dataframe(
    examples, hide_index=True,
    column_config={col: st.column_config.NumberColumn(format="%.2f") for col in ("c", "tokens per pass", "accepted/drafted", "round cost", "speedup", "speedup at best k")},
)
ex = examples_by_setting()
good, long_k, weak = ex.loc["small draft model, GPU"], ex.loc["same draft, k = 12"], ex.loc["weak draft model, GPU"]
copying, prose, early = ex.loc["prompt lookup while copying, CPU"], ex.loc["prompt lookup on fresh prose, CPU"], ex.loc["early exit at 28 of 30 layers, CPU"]
st.markdown(
    f"""
* A draft model twenty times cheaper than the target that agrees 80% of the time is the textbook case:
  {good['speedup']:.2f}× at k = 4. Going to k = 12 buys little ({long_k['speedup']:.2f}×): a streak of twelve
  acceptances at 0.8 is rare, yet every extra draft is paid for. The best is k = {int(good['best k'])} at {good['speedup at best k']:.2f}×.
* Halve the agreement to 0.4 and the same draft reaches only {weak['speedup']:.2f}× ({weak['speedup at best k']:.2f}× at k = {int(weak['best k'])}).
* Prompt lookup costs nothing to draft, so on a CPU its only price is the longer verify pass. While the model
  copies its prompt (α near 0.9) that is a bargain, {copying['speedup']:.2f}× at k = 8; on fresh prose (α near 0.2)
  it is a loss, {prose['speedup']:.2f}×, and no k wins back a {prose['verify cost']:.1f}× verify pass. (With c = 0 and a
  constant verify cost the formula always prefers the largest k; a real CPU pass grows with k, so it does not.)
* An early exit at 28 of 30 layers agrees often, but each draft costs almost a full target pass:
  {early['speedup']:.2f}× at k = 4 and at best {early['speedup at best k']:.2f}×. The benchmark on this machine shows the same.
"""
)


def measure_batch_button(k: int) -> None:
    """*Measure on this machine*: `specviz batch` at the page's settings; its points replace the shipped ones."""
    plan = batch_plan(k, access.current_policy())
    help_text = (
        f"`specviz batch` here: greedy prompt lookup with k = {plan.k} on the copy prompts, B = "
        f"{', '.join(map(str, plan.batch_sizes))}, {plan.max_new_tokens} new tokens per row, {plan.warmup} warm-up and "
        f"{plan.repeats} timed run(s) of each side per B; about a minute on a small CPU. Each batched run takes the model as "
        f"one turn ({plan.batched_runs} in all), so other sessions' rounds run in between. One long job per participant at a time."
    )
    if not st.button("Measure on this machine", key="batch_measure", help=help_text):
        return
    for message in plan.limits:
        access.limited(message)
    bar = st.progress(0.0, text="loading the model, then B = 1…")
    try:
        mine = measure_batches_here(plan, lambda done, total, what: bar.progress(done / total, text=f"{md_text(what)} ({done}/{total})"))
    except (ValueError, RuntimeError) as exc:  # a refused or stopped job, a model that will not load; OOM is a RuntimeError
        st.error(f"Could not measure: {md_text(exc)}")
    else:
        st.session_state[BATCH_MEASURED_KEY] = mine
    bar.empty()


def draw_batch_lesson(lesson: BatchLesson) -> None:
    """The crossover metrics (when a profile predicts) and the two charts of the *At batch B* section."""
    if lesson.profile_name:
        (first_b, first_ratio), (last_b, last_ratio) = lesson.predicted_ratios()[0], lesson.predicted_ratios()[-1]
        cols = st.columns(3)
        cols[0].metric("speculation stops paying at", lesson.crossover_text, help=f"predicted from {lesson.profile_name} at k = {lesson.k}")
        cols[1].metric(f"speculative ÷ plain at B = {first_b}", f"{first_ratio:.2f}×")
        cols[2].metric(f"at B = {last_b}", f"{last_ratio:.2f}×")
    left, right = st.columns(2)
    left.plotly_chart(batch_throughput_figure(lesson.frame), width="stretch")
    left.caption("Tokens/s of every stream together. Plain decoding climbs with B: one pass serves B rows for the price of little more than one.")
    right.plotly_chart(batch_ratio_figure(lesson.ratios, lesson.crossover), width="stretch")
    where = "; the red line is where it stops on this profile" if lesson.profile_name else ""
    right.caption(f"Above the dashed line speculation still pays{where}. {lesson.measured_note}")


def at_batch_b(selected: CostProfile | None, available: dict[str, CostProfile], alpha: float, k: int, c: float) -> None:
    """The *At batch B* section: what speculation does not buy once a batch has used up the spare arithmetic."""
    st.header("At batch B")
    st.markdown(
        "Everything above is one stream. A server decodes B streams at once: plain decoding as one pass over B rows "
        "per token, speculative decoding as one verify over B rows of k + 1 tokens per round, every row keeping its own "
        "accepted drafts. The measured batched passes of a profile predict both throughputs at your k and c; "
        "**Measure on this machine** decodes B copy prompts together here, plainly and speculatively, and draws the points."
    )
    last = last_run_alpha(session_points())
    if last is not None:
        choices = [f"the sidebar's α ({alpha:.2f})", f"the last measured run's α ({last:.2f})"]
        pick = widgets.radio("acceptance rate at batch B", choices, horizontal=True, key="theory_batch_alpha_source")
        alpha = last if pick == choices[1] else alpha
    measure_batch_button(k)
    mine = st.session_state.get(BATCH_MEASURED_KEY)
    lesson = batch_lesson(selected, available, alpha, k, c, (mine.triples, mine.note, mine.overhead_ms_per_row) if isinstance(mine, BatchMeasurement) else None)
    if lesson is None or not lesson.profile_name:
        st.info("No profile here has batched passes yet: `python -m specviz profile --batch 1,2,4,8,16,32 --out profile.json` measures them.")
    if lesson is not None:
        draw_batch_lesson(lesson)
    st.caption(
        "Why the arithmetic stops being spare: at batch 1 a pass mostly waits for the weights to arrive, so checking k + 1 "
        "tokens costs little more than checking one, and speculation spends work that would otherwise idle. Batching spends "
        "that same idle work on other people's tokens. Add k drafts per row and one pass carries B·(k + 1) tokens: every "
        "draft the target rejects is now real work taken from a row that would surely have produced a token. Past the "
        "crossover the rejected drafts cost more time than the accepted ones save, which is why a service turns "
        "speculation off (or shortens k) as load rises and keeps it for quiet, latency-bound hours. On a CPU the arithmetic "
        "is scarce even at batch 1, so the crossover comes early."
    )


at_batch_b(profile, available, alpha, k, c)
