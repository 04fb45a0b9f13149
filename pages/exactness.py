"""Exactness lab: why is the output distribution unchanged, and what goes wrong with the tempting shortcuts?"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from specviz.config import EMBEDDED_TARGET
from specviz.core.limits import SEED_UI_MAX
from specviz.core.toy import POSTERIOR_ALPHA, POSTERIOR_THRESHOLD, TOY_VARIANTS
from specviz.experiments.lab import LAB_DRAFTERS, REAL_MODES, GreedyResult, RealResult
from specviz.ui.common import access, widgets
from specviz.ui.common.navigation import route_through_app
from specviz.ui.labs.exactness import (
    SEED_CHECK,
    SEED_CHECK_MAX_N,
    pvalues_over_seeds,
    real_summary,
    run_greedy,
    run_real,
    sample_toy,
    toy_distributions,
)
from specviz.ui.room.lesson import checklist
from specviz.viz.lab import convergence_figure, convergence_frame, histogram_figure, real_frame, real_histogram_figure, toy_frame
from specviz.viz.markdown import md_text

route_through_app()  # a fresh server's first request may land here without app.py

VARIANT_LABELS = {
    "exact": "exact: on a rejection, draw from the residual max(0, p − q)",
    "resample_from_target": "bug: on a rejection, draw from p_target instead of the residual",
    "greedy_draft_soft_q": "bug: draft argmax q_draft, but accept with min(1, p/q) using the soft q",
    "typical_acceptance": f"shipped: typical acceptance (Medusa): keep x when p(x) > min({POSTERIOR_THRESHOLD:g}, {POSTERIOR_ALPHA:g}·e^−H(p)), else draw from p",
}
TYPICAL_CAPTION = (
    f"Typical acceptance is how the Medusa repository (`evaluate_posterior`, posterior_threshold ε = {POSTERIOR_THRESHOLD:g}, posterior_alpha "
    f"δ = {POSTERIOR_ALPHA:g}) and vLLM's typical acceptance sampler accept candidates: a drafted token stays whenever the target finds it "
    "likely enough, p_target(x) > min(ε, δ·exp(−H(p_target))), and otherwise the token is drawn from p_target. It never "
    "divides by q_draft, so nothing undoes the drafter's preferences: at temperature > 0 plausible tokens the drafter "
    "likes are emitted too often, and the chi-square test catches it. At temperature 0 (one-hot p_target) only the argmax "
    "clears the bar, so it is exactly greedy decoding. (TGI's Medusa takes another route: it samples the target's own token "
    "at each position and keeps a candidate only when it equals that sample, which is exact.) specviz verifies Medusa's "
    "candidates with the exact rule."
)
DEFAULT_VOCAB = pd.DataFrame(
    {
        "token": ["the", "a", "cat", "dog", "sat", "ran"],
        "p_target": [30.0, 20.0, 20.0, 15.0, 10.0, 5.0],
        "q_draft": [10.0, 35.0, 10.0, 25.0, 10.0, 10.0],
    }
)
SAMPLE_SIZES = (100, 1_000, 10_000, 100_000, 1_000_000)
GREEDY_PROMPT, GREEDY_DRAFTER = "Repeat exactly: one two three four, one two three four.", "lookup"
REAL_KEY = "exactness_real_result"
GREEDY_KEY = "exactness_greedy_result"


def target_inputs(prefix: str) -> tuple[str, str]:
    return access.target_and_device(f"{prefix}_target", f"{prefix}_device", EMBEDDED_TARGET)  # the owner's list in shared mode


policy = access.current_policy(report=True)
st.title("Exactness lab")
st.caption("Why is the output distribution unchanged, and what goes wrong with the tempting shortcuts?")
checklist(__file__)  # this page's lesson task, if any (docs/lesson-45min.md)

# ---------------------------------------------------------------------------------------------
st.header("1 · A toy vocabulary")
st.markdown(
    "Edit how much the target (p_target) and the drafter (q_draft) like each token; weights are normalised. "
    "Each sample is one speculative position: draft x from q_draft, keep it with probability min(1, p/q), "
    "otherwise draw a replacement. The emitted tokens should follow p_target, whatever q_draft is."
)
left, right = st.columns(2)
with left:
    edited = widgets.data_editor(
        "toy vocabulary", DEFAULT_VOCAB, key="lab_vocab", text_chars=20, hide_index=True,
        column_config={
            "token": st.column_config.TextColumn("token", max_chars=20, width="small"),
            "p_target": st.column_config.NumberColumn("p_target weight", min_value=0.0, step=1.0, width="small"),
            "q_draft": st.column_config.NumberColumn("q_draft weight", min_value=0.0, step=1.0, width="small"),
        },
    )
with right:
    variant = widgets.radio("Rule", TOY_VARIANTS, format_func=VARIANT_LABELS.get, key="lab_variant")
    sizes = access.capped_options(SAMPLE_SIZES, policy.max_samples)
    access.refuse_over("lab_num_samples", sizes, "samples N")
    num_samples = widgets.select_slider("samples N", sizes, value=min(10_000, max(sizes)), key="lab_num_samples", format_func=lambda n: f"{n:,}")
    seed = widgets.number_input("seed", 0, SEED_UI_MAX, value=0, key="lab_seed")
    if variant == "typical_acceptance":
        st.caption(TYPICAL_CAPTION)

toy_error = None
try:
    names = [str(t) if t is not None else "" for t in edited["token"]]
    p_target, q_draft = toy_distributions(edited["p_target"].fillna(-1).tolist(), edited["q_draft"].fillna(-1).tolist())
except ValueError as exc:
    toy_error = f"{exc} Fix the table to continue."

if toy_error:
    st.error(md_text(toy_error))
else:
    toy = sample_toy(p_target, q_draft, int(num_samples), int(seed), variant)
    tv, pvalue = float(toy.tv[-1]), float(toy.pvalues[-1])
    with st.container():
        m = st.columns(3)
        m[0].metric("TV from p_target", f"{tv:.4f}", help="½ Σ |empirical − p_target|")
        m[1].metric(
            "chi-square p-value", f"{pvalue:.3g}",
            help="How surprising these samples would be if they came from p_target. For an exact rule it is uniform between 0 and 1: "
            "below 0.05 one run in 20, by chance. Small (< 0.01) again and again means the samples are not from p_target.",
        )  # fmt: skip
        m[2].metric("Σ min(p, q)", f"{toy.overlap:.2f}", help="Leviathan's β: the chance the draft is kept")
        verdict = "consistent with p_target" if pvalue >= 0.01 else "NOT distributed as p_target"
        (st.success if pvalue >= 0.01 else st.error)(f"{int(num_samples):,} samples: {verdict}.")
        seeds = pvalues_over_seeds(tuple(p_target.tolist()), tuple(q_draft.tolist()), int(num_samples), variant)
        low = sum(p < 0.05 for p in seeds)
        st.caption(
            f"One p-value is one roll of a die. The same table with {SEED_CHECK} seeds at N = {min(int(num_samples), SEED_CHECK_MAX_N):,}: "
            f"p < 0.05 in **{low} of {SEED_CHECK}** (median p = {sorted(seeds)[SEED_CHECK // 2]:.2f}). An exact rule lands there about "
            f"1 time in 20 by chance; a biased rule nearly every time once N is large."
        )
    df = toy_frame(names, p_target.tolist(), q_draft.tolist(), toy.counts[-1].tolist(), toy.limit.tolist())
    chart_left, chart_right = st.columns(2)
    chart_left.plotly_chart(histogram_figure(df, f"{int(num_samples):,} emitted tokens · {variant}"), width="stretch")
    chart_left.caption("Green bars should match the blue ones. Black diamonds mark where this rule converges: on p_target only for the exact rule.")
    convergence = convergence_frame(toy.checkpoints, toy.tv.tolist(), toy.pvalues.tolist(), toy.noise.tolist())
    chart_right.plotly_chart(convergence_figure(convergence), width="stretch")
    chart_right.caption(
        "An exact sampler's distance falls like 1/√N along the dashed line. Its p-value wanders anywhere between 0 and 1 as N "
        "grows, and dips into the shaded band below 0.05 now and then (about 5% of the time, by design of the test): a dip is "
        "not a failure. A biased rule's distance levels off at a fixed value while its p-value falls to 0 and stays there."
    )
    with st.expander("Why the two shortcuts and typical acceptance fail"):
        st.markdown(
            """
* **Resampling from p_target.** A token v is emitted by acceptance with probability min(p(v), q(v)). The
  rejected mass must make up exactly what is missing, p(v) − min(p(v), q(v)) = max(0, p(v) − q(v)), and that is
  the residual. Drawing from p_target instead hands extra mass to the tokens the draft already over-proposes.
* **Greedy drafting with a soft q.** The acceptance test min(1, p/q) corrects for *how often* q proposes x. If x is
  always the argmax of q, it is proposed with probability 1, not q(x), so the correction is wrong; the test should
  use the one-hot q of a greedy drafter (then the rule keeps x with probability p(x)).
* **Typical acceptance.** A drafted v is kept with probability 1 whenever p(v) clears the bar, so v is emitted with
  probability q(v) + (rejected mass)·p(v) instead of p(v): too often where q(v) > p(v), too rarely elsewhere. It trades
  exactness for longer accepted runs; the output is no longer a sample from the target.
"""
        )

# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
st.header("2 · A real model: the next token, N times")
st.markdown(
    "The same experiment on the target's real next-token distribution, two ways:\n\n"
    f"* **{REAL_MODES['fast']}**: one target pass and one draft proposal give the full p_target and q_draft at the "
    "first position; the rule above (vectorised, any variant) then draws N first tokens from them, and the target "
    "alone draws N tokens from p_target.\n"
    f"* **{REAL_MODES['engine']}**: every speculative sample is a complete, fresh run of the engine (prefill, "
    "draft, one verify pass) with max new tokens = 2 and k = 1, so the drafter proposes exactly one token, and we keep "
    "the first token the run emits: the accepted draft or its replacement. (With max new tokens = 1 the loop would "
    "not draft at all.) Every target-alone sample is a fresh plain run of one token. Slow, so N stays small."
)
real_mode = widgets.radio("method", list(REAL_MODES), format_func=REAL_MODES.get, horizontal=True, key="lab_real_mode")
c1, c2, c3, c4 = st.columns(4)
real_prompt = widgets.on(c1).text_input("prompt (fed raw, no chat template)", value="My favourite colour is", key="lab_real_prompt")
real_drafter = widgets.on(c2).selectbox("drafter", LAB_DRAFTERS, index=LAB_DRAFTERS.index("early-exit") if "early-exit" in LAB_DRAFTERS else 0, key="lab_real_drafter")
real_temperature = widgets.on(c3).slider("temperature", 0.1, 2.0, 1.0, 0.1, key="lab_real_temperature")
if real_mode == "fast":
    sizes = access.capped_options([1_000, 10_000, 100_000], policy.max_samples)
    access.refuse_over("lab_real_n_fast", sizes, "samples N")
    real_n = widgets.on(c4).select_slider("samples N", sizes, value=min(10_000, max(sizes)), key="lab_real_n_fast", format_func=lambda n: f"{n:,}")
    real_variant = widgets.radio("rule", TOY_VARIANTS, format_func=VARIANT_LABELS.get, key="lab_real_variant", horizontal=True)
    if real_variant == "typical_acceptance":
        st.caption(TYPICAL_CAPTION)
else:
    sizes = access.capped_options([10, 20, 50, 100, 200], policy.max_runs)
    access.refuse_over("lab_real_n", sizes, "runs N")
    real_n = widgets.on(c4).select_slider("samples N (each is a run)", sizes, value=min(20, max(sizes)), key="lab_real_n")
    real_variant = "exact"
real_target, real_device = target_inputs("lab_real")

if st.button("Sample the next token", key="lab_real_run", type="primary"):
    try:
        bar = st.progress(0.0, text="sampling…") if real_mode == "engine" else None
        progress = (lambda done, total: bar.progress(done / total, text=f"{done} of {total} speculative + plain runs")) if bar else None
        st.session_state[REAL_KEY] = run_real(
            real_prompt, real_target, real_device, real_drafter, float(real_temperature), real_mode, int(real_n), real_variant, on_progress=progress,
        )
        if bar:
            bar.empty()
    except ValueError as exc:
        st.error(md_text(exc))

real = st.session_state.get(REAL_KEY)
if isinstance(real, RealResult):
    summary = real_summary(real)
    if real.drafted_runs < len(real.spec_tokens):
        st.info(
            f"The {real.config.drafter} drafter proposed a token in {real.drafted_runs} of {len(real.spec_tokens)} samples; "
            "in the others the first token came straight from the target. Early exit always drafts."
        )
    m = st.columns(4)
    m[0].metric("speculative: TV from p_target", f"{summary.spec_tv:.3f}")
    m[1].metric("speculative: chi-square p", f"{summary.spec_pvalue:.3g}")
    m[2].metric("target alone: TV from p_target", f"{summary.target_tv:.3f}")
    m[3].metric("target alone: chi-square p", f"{summary.target_pvalue:.3g}")
    df = real_frame(summary.names, summary.p_buckets, summary.q_buckets, summary.spec_counts, summary.target_counts)
    rule = "" if real.variant == "exact" else f" · {real.variant}"
    title = f"first token after {real.prompt!r} · {real.config.drafter} · T={real.config.temperature:g}{rule} · N={len(real.spec_tokens):,} each"
    st.plotly_chart(real_histogram_figure(df, title), width="stretch")
    st.caption(
        "Both empirical histograms should scatter around the blue p_target, whatever the pink q_draft looks like; "
        "the chi-square p-value says whether a gap is more than chance. The last bar pools every token outside the top ten."
    )
    if real.mode == "engine":
        st.caption("Chi-square wants about 5 expected samples per bar; with this few runs read the p-values loosely.")

# ---------------------------------------------------------------------------------------------
st.header("3 · Greedy: speculative and plain, side by side")
st.markdown(
    "At temperature 0 both distributions are one-hot, so the rule keeps a draft exactly when it equals the target's "
    "argmax, and the output should be token for token what plain greedy decoding writes."
)
g1, g2, g3 = st.columns([3, 1, 1])
# a default that drafts: prompt lookup on a prompt the answer repeats (2.0 tokens per target pass with the embedded
# model); with a prose prompt the default drafters draft nothing and the check would compare two plain runs
greedy_prompt = widgets.on(g1).text_input("prompt (chat template)", value=GREEDY_PROMPT, key="lab_greedy_prompt")
greedy_drafter = widgets.on(g2).selectbox("drafter", LAB_DRAFTERS, index=LAB_DRAFTERS.index(GREEDY_DRAFTER), key="lab_greedy_drafter")
access.refuse_above("lab_greedy_k", min(8, policy.max_draft_tokens), "k")
access.refuse_above("lab_greedy_new", max(8, min(96, policy.max_new_tokens)), "max new tokens")
greedy_k = widgets.on(g3).slider("k", 1, min(8, policy.max_draft_tokens), min(4, policy.max_draft_tokens), key="lab_greedy_k")
greedy_new = widgets.slider("max new tokens", 8, max(8, min(96, policy.max_new_tokens)), min(32, max(8, policy.max_new_tokens)), 8, key="lab_greedy_new")
greedy_target, greedy_device = target_inputs("lab_greedy")

if st.button("Run both", key="lab_greedy_run", type="primary"):
    try:
        with st.spinner("decoding twice…"):
            st.session_state[GREEDY_KEY] = run_greedy(greedy_prompt, greedy_target, greedy_device, greedy_drafter, int(greedy_k), int(greedy_new))
    except ValueError as exc:
        st.error(md_text(exc))

greedy = st.session_state.get(GREEDY_KEY)
if isinstance(greedy, GreedyResult):
    if greedy.identical and greedy.drafted == 0:
        st.warning(
            f"Identical, but the {greedy.config.drafter} drafter proposed nothing on this prompt: both runs were plain decoding, "
            "so this proves nothing about the rule. Try a prompt whose answer repeats it, or another drafter."
        )
    elif greedy.identical:
        st.success(
            f"Identical: {len(greedy.spec_ids)} tokens, token for token, though {greedy.drafted} tokens were drafted and "
            f"{greedy.accepted} of them kept ({greedy.tokens_per_target_pass:.2f} tokens per target pass speculatively)."
        )
    else:
        st.warning(
            f"The outputs differ from token {greedy.first_difference}. Greedy speculative decoding is exact in exact arithmetic; a batched "
            "(k+1)-token pass can round differently from one-token passes, which can flip a near-tie between two tokens."
        )
    a, b = st.columns(2)
    a.markdown(f"**speculative ({greedy.config.drafter}, k = {greedy.config.num_draft_tokens})**")
    a.text(greedy.spec_text)
    b.markdown("**plain greedy decoding**")
    b.text(greedy.plain_text)
