"""Exactness lab: why is the output distribution unchanged, and what goes wrong with the tempting shortcuts?"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd
import streamlit as st
import torch

from specviz.config import DRAFTER_KINDS, EMBEDDED_TARGET, RunConfig, validate_prompt
from specviz.core.toy import (
    TOY_VARIANTS,
    chi_square_pvalue,
    counts_at,
    emitted_distribution,
    expected_tv_noise,
    log_checkpoints,
    normalise,
    sample_first_tokens,
    tv_distance,
)
from specviz.viz.lab import convergence_figure, convergence_frame, histogram_figure, real_frame, real_histogram_figure, toy_frame

VARIANT_LABELS = {
    "exact": "exact: on a rejection, draw from the residual max(0, p − q)",
    "resample_from_target": "bug: on a rejection, draw from p_target instead of the residual",
    "greedy_draft_soft_q": "bug: draft argmax q_draft, but accept with min(1, p/q) using the soft q",
}
DEFAULT_VOCAB = pd.DataFrame(
    {
        "token": ["the", "a", "cat", "dog", "sat", "ran"],
        "p_target": [30.0, 20.0, 20.0, 15.0, 10.0, 5.0],
        "q_draft": [10.0, 35.0, 10.0, 25.0, 10.0, 10.0],
    }
)
SAMPLE_SIZES = (100, 1_000, 10_000, 100_000, 1_000_000)
REAL_KEY = "exactness_real_result"
GREEDY_KEY = "exactness_greedy_result"
LAB_DRAFTERS = [d for d in DRAFTER_KINDS if d not in ("none", "model")]  # the ones that need no second model
TOP_TOKENS = 10


@dataclass(frozen=True)
class RealResult:
    """First emitted tokens of N fresh speculative runs and N plain target runs, and the target's top-N at that position."""

    config: RunConfig
    prompt: str
    token_ids: tuple[int, ...]  # the target's most likely tokens at the first position
    token_texts: tuple[str, ...]
    p_target: tuple[float, ...]
    q_draft: tuple[float, ...] | None
    spec_tokens: tuple[int, ...]
    target_tokens: tuple[int, ...]
    drafted_runs: int  # speculative runs in which the drafter proposed a token


@dataclass(frozen=True)
class GreedyResult:
    config: RunConfig
    prompt: str
    spec_ids: tuple[int, ...]
    plain_ids: tuple[int, ...]
    spec_text: str
    plain_text: str
    tokens_per_pass: float


def target_inputs(prefix: str) -> tuple[str, str]:
    with st.expander("Target model", expanded=False):
        target = st.text_input("hub id, local folder or .gguf", value=EMBEDDED_TARGET, key=f"{prefix}_target")
        device = st.selectbox("device", ["auto", "cpu", "cuda", "mps"], key=f"{prefix}_device")
    return target.strip() or EMBEDDED_TARGET, device


def load_target(source: str, device: str):
    from specviz.ui.models import get_model

    return get_model(source, device)


def early_exit_for(config: RunConfig, target):
    if config.drafter != "early-exit":
        return None
    from specviz.runs import exit_layer_for
    from specviz.ui.models import get_early_exit

    return get_early_exit(target, exit_layer_for(config, target))


st.title("Exactness lab")
st.caption("Why is the output distribution unchanged, and what goes wrong with the tempting shortcuts?")

# ---------------------------------------------------------------------------------------------
st.header("1 · A toy vocabulary")
st.markdown(
    "Edit how much the target (p_target) and the drafter (q_draft) like each token; weights are normalised. "
    "Each sample is one speculative position: draft x from q_draft, keep it with probability min(1, p/q), "
    "otherwise draw a replacement. The emitted tokens should follow p_target, whatever q_draft is."
)
left, right = st.columns([2, 3])
with left:
    edited = st.data_editor(
        DEFAULT_VOCAB, key="lab_vocab", hide_index=True, num_rows="fixed",
        column_config={
            "token": st.column_config.TextColumn("token", max_chars=20),
            "p_target": st.column_config.NumberColumn("p_target weight", min_value=0.0, step=1.0),
            "q_draft": st.column_config.NumberColumn("q_draft weight", min_value=0.0, step=1.0),
        },
    )
    variant = st.radio("Rule", TOY_VARIANTS, format_func=VARIANT_LABELS.get, key="lab_variant")
    num_samples = st.select_slider("samples N", SAMPLE_SIZES, value=10_000, key="lab_num_samples", format_func=lambda n: f"{n:,}")
    seed = st.number_input("seed", 0, 2**31 - 1, value=0, key="lab_seed")

toy_error = None
try:
    names = [str(t) if t is not None else "" for t in edited["token"]]
    p_target = normalise(edited["p_target"].fillna(-1).tolist(), "p_target")
    q_draft = normalise(edited["q_draft"].fillna(-1).tolist(), "q_draft")
except ValueError as exc:
    toy_error = f"{exc} Fix the table to continue."

if toy_error:
    right.error(toy_error)
else:
    generator = torch.Generator().manual_seed(int(seed))
    samples = sample_first_tokens(p_target, q_draft, int(num_samples), generator, variant)
    checkpoints = log_checkpoints(int(num_samples))
    counts = counts_at(samples, p_target.numel(), checkpoints)  # (M, V)
    tv = tv_distance(counts, p_target)
    pvalues = chi_square_pvalue(counts, p_target)
    limit = emitted_distribution(p_target, q_draft, variant)
    with right:
        m = st.columns(3)
        m[0].metric("TV distance from p_target", f"{float(tv[-1]):.4f}", help="½ Σ |empirical − p_target|")
        m[1].metric("chi-square p-value", f"{float(pvalues[-1]):.3g}", help="Small (< 0.01) means these samples are very unlikely under p_target.")
        m[2].metric("overlap Σ min(p, q)", f"{float(torch.minimum(p_target, q_draft).sum()):.2f}", help="Leviathan's β: the chance the draft is kept")
        verdict = "consistent with p_target" if float(pvalues[-1]) >= 0.01 else "NOT distributed as p_target"
        (st.success if float(pvalues[-1]) >= 0.01 else st.error)(f"{int(num_samples):,} samples: {verdict}.")
    df = toy_frame(names, p_target.tolist(), q_draft.tolist(), counts[-1].tolist(), limit.tolist())
    st.plotly_chart(histogram_figure(df, f"{int(num_samples):,} emitted tokens · {variant}"), width="stretch")
    st.caption("Green bars should match the blue ones. Black diamonds mark where this rule converges: on p_target only for the exact rule.")
    noise = expected_tv_noise(p_target, checkpoints)
    st.plotly_chart(convergence_figure(convergence_frame(checkpoints, tv.tolist(), pvalues.tolist(), noise.tolist())), width="stretch")
    st.caption(
        "An exact sampler's distance falls like 1/√N along the dashed line and its p-value wanders above 0.05; "
        "a biased one levels off at a fixed distance while its p-value collapses to 0."
    )
    with st.expander("Why the two shortcuts fail"):
        st.markdown(
            """
* **Resampling from p_target.** A token v is emitted by acceptance with probability min(p(v), q(v)). The
  rejected mass must make up exactly what is missing, p(v) − min(p(v), q(v)) = max(0, p(v) − q(v)), and that is
  the residual. Drawing from p_target instead hands extra mass to the tokens the draft already over-proposes.
* **Greedy drafting with a soft q.** The acceptance test min(1, p/q) corrects for *how often* q proposes x. If x is
  always the argmax of q, it is proposed with probability 1, not q(x), so the correction is wrong; the test should
  use the one-hot q of a greedy drafter (then the rule keeps x with probability p(x)).
"""
        )

# ---------------------------------------------------------------------------------------------
st.header("2 · A real model: the next token, N times")
st.markdown(
    "The same experiment on the target's real next-token distribution. Each speculative sample is a complete, "
    "fresh run of the engine (prefill, draft, one verify pass) with max new tokens = 2 and k = 1, so the drafter "
    "proposes exactly one token; we keep the first token the run emits: the accepted draft or its replacement. "
    "(With max new tokens = 1 the loop would not draft at all.) Each target-alone sample is a fresh plain run of one token."
)
c1, c2, c3, c4 = st.columns(4)
real_prompt = c1.text_input("prompt (fed raw, no chat template)", value="My favourite colour is", key="lab_real_prompt")
real_drafter = c2.selectbox("drafter", LAB_DRAFTERS, index=LAB_DRAFTERS.index("early-exit") if "early-exit" in LAB_DRAFTERS else 0, key="lab_real_drafter")
real_temperature = c3.slider("temperature", 0.1, 2.0, 1.0, 0.1, key="lab_real_temperature")
real_n = c4.select_slider("samples N (each is a run)", [20, 50, 100, 200, 400], value=50, key="lab_real_n")
real_target, real_device = target_inputs("lab_real")

if st.button("Sample the next token", key="lab_real_run", type="primary"):
    try:
        validate_prompt(real_prompt)
        config = RunConfig(target=real_target, drafter=real_drafter, num_draft_tokens=1, temperature=float(real_temperature), max_new_tokens=2, chat=False, device=real_device)
        target = load_target(config.target, config.device)
        from specviz.models import encode_prompt
        from specviz.runs import build_decoder

        prompt_ids = encode_prompt(target.tokenizer, real_prompt, chat=False)
        early = early_exit_for(config, target)
        bar = st.progress(0.0, text="sampling…")
        spec_tokens, target_tokens, first, drafted_runs = [], [], None, 0
        for i in range(int(real_n)):
            spec = build_decoder(config, target, prompt_ids, early_exit=early, seed=2 * i)
            record = spec.step()
            if first is None:
                first = record
            drafted_runs += record.num_drafted > 0
            spec_tokens.append(record.emitted[0])
            plain = build_decoder(dataclasses.replace(config, max_new_tokens=1), target, prompt_ids, seed=2 * i + 1, baseline=True)
            target_tokens.append(plain.step().emitted[0])
            bar.progress((i + 1) / int(real_n), text=f"{i + 1} of {int(real_n)} speculative + plain runs")
        bar.empty()
        dist = first.dists[0]  # the first verified position: the drafted one, or the bonus position if nothing was drafted
        top = min(TOP_TOKENS, len(dist.token_ids))
        ids = tuple(dist.token_ids[:top])
        st.session_state[REAL_KEY] = RealResult(
            config=config, prompt=real_prompt, token_ids=ids, token_texts=tuple(target.tokenizer.decode([t]) for t in ids),
            p_target=tuple(dist.p_target[:top]), q_draft=tuple(dist.q_draft[:top]) if dist.q_draft is not None else None,
            spec_tokens=tuple(spec_tokens), target_tokens=tuple(target_tokens), drafted_runs=drafted_runs,
        )
    except ValueError as exc:
        st.error(str(exc))

real = st.session_state.get(REAL_KEY)
if isinstance(real, RealResult):
    ids = list(real.token_ids)
    other_p = max(0.0, 1.0 - sum(real.p_target))
    names = [repr(t)[1:-1] for t in real.token_texts] + ["(other)"]
    p_buckets = list(real.p_target) + [other_p]
    q_buckets = (list(real.q_draft) + [max(0.0, 1.0 - sum(real.q_draft))]) if real.q_draft is not None else None

    def bucket(tokens: tuple[int, ...]) -> list[int]:
        counts = [sum(t == i for t in tokens) for i in ids]
        return counts + [len(tokens) - sum(counts)]

    if real.drafted_runs < len(real.spec_tokens):
        st.info(
            f"The {real.config.drafter} drafter proposed a token in {real.drafted_runs} of {len(real.spec_tokens)} runs; "
            "in the others the first token came straight from the target. Early exit always drafts."
        )
    spec_counts, target_counts = bucket(real.spec_tokens), bucket(real.target_tokens)
    expected = torch.tensor(p_buckets, dtype=torch.float64)
    spec_p = float(chi_square_pvalue(torch.tensor(spec_counts), expected))
    target_p = float(chi_square_pvalue(torch.tensor(target_counts), expected))
    m = st.columns(4)
    m[0].metric("speculative: TV from p_target", f"{float(tv_distance(torch.tensor(spec_counts), expected)):.3f}")
    m[1].metric("speculative: chi-square p", f"{spec_p:.3g}")
    m[2].metric("target alone: TV from p_target", f"{float(tv_distance(torch.tensor(target_counts), expected)):.3f}")
    m[3].metric("target alone: chi-square p", f"{target_p:.3g}")
    df = real_frame(names, p_buckets, q_buckets, spec_counts, target_counts)
    title = f"first token after {real.prompt!r} · {real.config.drafter} · T={real.config.temperature:g} · N={len(real.spec_tokens)} each"
    st.plotly_chart(real_histogram_figure(df, title), width="stretch")
    st.caption(
        "Both empirical histograms scatter around the blue p_target, whatever the orange q_draft looks like. "
        f"With N = {len(real.spec_tokens)} the scatter is wide; the chi-square p-value says whether it is more than chance."
    )
    st.caption("Chi-square needs about 5 expected samples per bar to be accurate; with small N read the p-values loosely.")

# ---------------------------------------------------------------------------------------------
st.header("3 · Greedy: speculative and plain, side by side")
st.markdown(
    "At temperature 0 both distributions are one-hot, so the rule keeps a draft exactly when it equals the target's "
    "argmax, and the output should be token for token what plain greedy decoding writes."
)
g1, g2, g3 = st.columns([3, 1, 1])
greedy_prompt = g1.text_input("prompt (chat template)", value="Write a Python function that reverses a string.", key="lab_greedy_prompt")
greedy_drafter = g2.selectbox("drafter", LAB_DRAFTERS, key="lab_greedy_drafter")
greedy_k = g3.slider("k", 1, 8, 4, key="lab_greedy_k")
greedy_new = st.slider("max new tokens", 8, 96, 32, 8, key="lab_greedy_new")
greedy_target, greedy_device = target_inputs("lab_greedy")

if st.button("Run both", key="lab_greedy_run", type="primary"):
    try:
        validate_prompt(greedy_prompt)
        config = RunConfig(target=greedy_target, drafter=greedy_drafter, num_draft_tokens=int(greedy_k), temperature=0.0, max_new_tokens=int(greedy_new), device=greedy_device)
        target = load_target(config.target, config.device)
        from specviz.models import encode_prompt
        from specviz.runs import build_decoder

        prompt_ids = encode_prompt(target.tokenizer, greedy_prompt, config.chat)
        with st.spinner("decoding twice…"):
            spec = build_decoder(config, target, prompt_ids, early_exit=early_exit_for(config, target))
            spec.run()
            plain = build_decoder(config, target, prompt_ids, baseline=True)
            plain.run()
        st.session_state[GREEDY_KEY] = GreedyResult(
            config=config, prompt=greedy_prompt, spec_ids=tuple(spec.generated), plain_ids=tuple(plain.generated),
            spec_text=target.tokenizer.decode(spec.generated, skip_special_tokens=True),
            plain_text=target.tokenizer.decode(plain.generated, skip_special_tokens=True),
            tokens_per_pass=spec.stats().tokens_per_target_pass,
        )
    except ValueError as exc:
        st.error(str(exc))

greedy = st.session_state.get(GREEDY_KEY)
if isinstance(greedy, GreedyResult):
    same = greedy.spec_ids == greedy.plain_ids
    if same:
        st.success(f"Identical: {len(greedy.spec_ids)} tokens, token for token ({greedy.tokens_per_pass:.2f} tokens per target pass speculatively).")
    else:
        first_diff = next((i for i, (a, b) in enumerate(zip(greedy.spec_ids, greedy.plain_ids)) if a != b), min(len(greedy.spec_ids), len(greedy.plain_ids)))
        st.warning(
            f"The outputs differ from token {first_diff}. Greedy speculative decoding is exact in exact arithmetic; a batched "
            "(k+1)-token pass can round differently from one-token passes, which can flip a near-tie between two tokens."
        )
    a, b = st.columns(2)
    a.markdown(f"**speculative ({greedy.config.drafter}, k = {greedy.config.num_draft_tokens})**")
    a.text(greedy.spec_text)
    b.markdown("**plain greedy decoding**")
    b.text(greedy.plain_text)
