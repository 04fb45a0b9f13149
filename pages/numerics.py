"""Numerics lab: speculative greedy output equals plain greedy output in float32; why not always in bfloat16?"""

from __future__ import annotations

import streamlit as st

from specviz.experiments.numerics import InvarianceReport
from specviz.ui.common import access, widgets
from specviz.ui.common.navigation import route_through_app
from specviz.ui.labs.numerics import (
    NumericsResult,
    invariance_menu,
    lab_device,
    lab_limits,
    measure_invariance,
    precision_label,
    precision_menu,
    run_comparison,
)
from specviz.viz.markdown import md_text
from specviz.viz.numerics import divergence_frame, invariance_figure, pass_diff_figure, pass_summary, traces_frame

RESULT_KEY = "numerics_result"
INVARIANCE_KEY = "numerics_invariance"
DEFAULT_PROMPT = "Write the opening paragraph of a short story about a lighthouse keeper who finds a message in a bottle."  # bfloat16 parts at a near-tie here


route_through_app()  # a fresh server's first request may land here without app.py


st.title("Numerics lab")
st.caption(
    "Speculative greedy decoding writes exactly what plain greedy decoding writes, in exact arithmetic. Run the same prompt in "
    "float32 and in bfloat16, plainly and speculatively, and see where the outputs part and why."
)

access.current_policy(report=True)
limits = lab_limits()  # the owner's caps in shared mode
access.refuse_above("num_new", limits.new_tokens, "max new tokens")
access.refuse_above("num_k", limits.k, "k")
prompt = widgets.text_area(
    "prompt (chat template)", value=DEFAULT_PROMPT[: limits.prompt_chars], key="num_prompt", height=80, max_chars=limits.prompt_chars
)
a, b, c, d = st.columns(4)
new_tokens = widgets.on(a).slider("max new tokens", 8, limits.new_tokens, min(32, limits.new_tokens), 8, key="num_new")
k = widgets.on(b).slider("k (drafts per round)", 1, limits.k, min(4, limits.k), key="num_k")
drafter = widgets.on(c).selectbox("drafter", ["ngram", "lookup"], key="num_drafter", help="Offline drafters: no second model to load.")


device = lab_device()
low = widgets.on(d).selectbox(
    "low precision", precision_menu(device), key="num_dtype", format_func=lambda p: precision_label(p),
    help="fp16 weights and int8 dynamic are CPU kernels (fbgemm); float16 is offered where the device has it (CUDA, MPS).",
)

if st.button("Run", key="num_run", type="primary", help="Four greedy runs and two scoring sweeps, about a minute on a small CPU; each model pass takes the model as one turn, so other sessions' rounds run in between."):
    bar = st.progress(0.0, text="loading the model in float32 and in " + precision_label(low) + "…")
    try:
        st.session_state[RESULT_KEY] = run_comparison(
            prompt, int(new_tokens), int(k), drafter, low, lambda done, total, what: bar.progress(done / total, text=f"{what} ({done}/{total})")
        )
        bar.empty()
    except (ValueError, RuntimeError) as exc:  # a model that will not load says what to do; OOM is a RuntimeError
        bar.empty()
        st.error(md_text(exc))

result = st.session_state.get(RESULT_KEY)
if not isinstance(result, NumericsResult):
    st.info("Press **Run**: plain and speculative greedy decoding of the prompt in float32 and in low precision.")
else:
    report = result.report
    div = divergence_frame(report, result.token_text)
    for col, d in zip(st.columns(len(report.divergences)), report.divergences):
        col.metric(f"{d.a} vs {d.b}", "identical" if d.position is None else f"part at token {d.position + 1}", help=f"{d.compared} tokens compared")
    st.dataframe(div, hide_index=True, width="stretch", column_config={
        "top-2 logit margin (first)": st.column_config.NumberColumn(format="%.4f"),
        "top-2 logit margin (second)": st.column_config.NumberColumn(format="%.4f"),
    })
    st.caption(
        "Each pair of greedy runs, and the first token where they choose differently. The margin is the gap between the top two "
        "logits of the row that chose: a small margin is a near-tie that rounding can flip."
    )
    st.plotly_chart(pass_diff_figure(report), width="stretch")
    st.caption(
        f"Every position of the float32 plain output, scored twice per dtype: by 1-token passes (plain decoding) and by "
        f"{report.k + 1}-token passes (a verify pass). Markers: how far apart the two rows' logits are; dotted: the top-2 margin. "
        "The argmax can only flip where a marker reaches its dotted line; crosses mark the flips."
    )
    summary = pass_summary(report)
    st.dataframe(summary, hide_index=True, width="stretch", column_config={
        "max_abs_diff": st.column_config.NumberColumn("largest |Δ logit|", format="%.2e"),
        "mean_abs_diff": st.column_config.NumberColumn("mean of per-position max |Δ logit|", format="%.2e"),
        "smallest_margin": st.column_config.NumberColumn("smallest top-2 margin", format="%.2e"),
        "argmax_flips": st.column_config.NumberColumn("argmax flips"),
    })
    with st.expander("The four outputs, token by token"):
        st.dataframe(traces_frame(report, result.token_text), hide_index=True, width="stretch")

st.header("Why greedy identity is a float32 guarantee")
st.markdown(
    """
At temperature 0 the verify rule keeps a draft exactly when it is the target's argmax at that position, and otherwise
emits the argmax. So speculative greedy decoding writes plain greedy decoding's output *if both compute the same argmax*.
They compute it from different passes: plain decoding scores one new token per pass; a verify pass scores k + 1 at once.
The matrix products then run in different blocks and orders, and floating-point addition is not associative, so the
two logit rows for the same position differ by rounding error.

* **float32** keeps 24 bits of mantissa (relative error about 6·10⁻⁸). The rows differ by around 10⁻⁵ of a logit
  (measured above), while the gap between the top two logits is almost never that small, so the argmax does not
  move and the outputs match token for token. The test suite checks exactly this, in float32.
* **bfloat16** keeps 8 bits (relative error about 4·10⁻³). The same reordering moves logits by tenths (on the
  embedded model up to about one logit), and a long answer is likely to pass a near-tie that small; there the argmax can flip, and from that token on the
  two outputs go their own ways. Neither is wrong: both are greedy decoding of the model up to rounding, and plain
  decoding in bfloat16 already differs from float32 (the third comparison above), as it differs between batch sizes.

**Serving in bfloat16** therefore means: expect speculative and plain greedy outputs to agree up to the first
near-tie, not everywhere, and do not read a difference as a broken verifier. Check a verifier in float32 (or with
the divergences above: they should sit where the margin is tiny); sampled output keeps the target's distribution up
to the same rounding.
"""
)

st.header("Why a verify pass must score each position as a 1-token pass would")
st.markdown(
    """
The rule's guarantee (sampled output distributed as the target's, greedy output equal to plain greedy) assumes that
p_target at a drafted position is the distribution the target would give there decoding alone. A verify pass computes it
inside a pass over k + 1 positions, so the precision must not let the other positions in the pass move it:

* **float32**: the sums run in another order; the rows differ by about 10⁻⁵ of a logit. Fit to verify.
* **float16 weights, float32 math** (fbgemm, the CPU default): every weight is rounded to float16 once, the same way in
  every pass; the arithmetic is float32. A position's logits move by float32 rounding only. Fit to verify, and on a CPU a
  pass over nine tokens costs not much more than one.
* **bfloat16**: the reordering moves logits by tenths; where the top two are that close the argmax flips. Greedy outputs
  part at near-ties; no position depends on *which* tokens were drafted, only on the pass's shape.
* **int8 dynamic (per-tensor scales)**: one activation scale for the whole pass, set by its largest value. A position's
  logits then depend on the other tokens in the pass, so p_target depends on what was drafted and the rule's guarantee is
  gone. It must never be the verification path.
"""
)
precisions = invariance_menu(device)
if st.button("Measure", key="num_inv_run", help="Decodes the prompt above once in float32, then scores its tokens in each precision; each model pass takes the model as one turn."):
    bar = st.progress(0.0, text="loading the model in " + ", ".join(precision_label(p) for p in precisions) + "…")
    try:
        st.session_state[INVARIANCE_KEY] = measure_invariance(
            prompt, int(new_tokens), int(k), precisions, lambda done, total, what: bar.progress(done / total, text=what)
        )
        bar.empty()
    except (ValueError, RuntimeError) as exc:
        bar.empty()
        st.error(md_text(exc))
invariance = st.session_state.get(INVARIANCE_KEY)
if not isinstance(invariance, InvarianceReport):
    st.info("Press **Measure**: the prompt's float32 greedy tokens scored by 1-token and by (k+1)-token passes in " + ", ".join(precisions) + ".")
else:
    st.plotly_chart(invariance_figure(invariance), width="stretch", key="fig_invariance")
    st.caption(
        f"Each marker: how far a position's logits move when it is scored inside a {invariance.k + 1}-token pass instead of alone, "
        "measured just now. Look at which lines stay under the dashed 10⁻³ line (fit to verify: float32, fp16 weights) and "
        "which sit orders of magnitude above it (int8's neighbours move it by whole logits)."
    )
    cols = st.columns(len(invariance.largest()))
    for col, (name, moved) in zip(cols, invariance.largest().items()):
        col.metric(precision_label(name), f"{moved:.1e}", help="largest |Δ logit| over every position")
