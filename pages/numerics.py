"""Numerics lab: speculative greedy output equals plain greedy output in float32; why not always in bfloat16?"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from specviz.ui import access
from specviz.ui.navigation import route_through_app
from specviz.ui.numerics_lab import EMBEDDED_TARGET, NumericsReport, compare, low_precision_dtypes, validate_prompt
from specviz.viz.markdown import md_text
from specviz.viz.numerics import divergence_frame, pass_diff_figure, pass_summary, traces_frame

RESULT_KEY = "numerics_result"
DEFAULT_PROMPT = "Write the opening paragraph of a short story about a lighthouse keeper who finds a message in a bottle."  # bfloat16 parts at a near-tie here


route_through_app()  # a fresh server's first request may land here without app.py


@dataclass(frozen=True)
class NumericsResult:
    prompt: str
    drafter: str
    report: NumericsReport
    texts: dict[int, str]  # token id -> its decoded text (untrusted model output)

    def token_text(self, token_id: int) -> str:
        return self.texts.get(int(token_id), "")


st.title("Numerics lab")
st.caption(
    "Speculative greedy decoding writes exactly what plain greedy decoding writes, in exact arithmetic. Run the same prompt in "
    "float32 and in bfloat16, plainly and speculatively, and see where the outputs part and why."
)

prompt = st.text_area("prompt (chat template)", value=DEFAULT_PROMPT, key="num_prompt", height=80)
a, b, c, d = st.columns(4)
new_tokens = a.slider("max new tokens", 8, 128, 32, 8, key="num_new")
k = b.slider("k (drafts per round)", 1, 8, 4, key="num_k")
drafter = c.selectbox("drafter", ["ngram", "lookup"], key="num_drafter", help="Offline drafters: no second model to load.")

from specviz.ui.numerics_lab import resolve_device, resolve_dtype  # noqa: E402  (torch; after the widgets so they draw first)

device = resolve_device("auto")
low = d.selectbox("low precision", low_precision_dtypes(device), key="num_dtype", help="float16 is offered where the device has it (CUDA, MPS).")

if st.button("Run", key="num_run", type="primary", help="Four greedy runs and two scoring sweeps, about a minute on a small CPU; each takes the model as one turn, so other sessions' rounds run in between."):
    bar = st.progress(0.0, text="loading the model in float32 and in " + low + "…")
    try:
        from specviz.ui.numerics_lab import encode_prompt, get_model

        validate_prompt(prompt)
        # the float32 copy is the one the other pages use when float32 is the device's default
        fp32 = "auto" if str(resolve_dtype("auto", device)) == "torch.float32" else "float32"
        models = {"float32": get_model(EMBEDDED_TARGET, "auto", fp32), low: get_model(EMBEDDED_TARGET, "auto", low)}
        tokenizer = models["float32"].tokenizer
        prompt_ids = encode_prompt(tokenizer, prompt, True)
        with access.long_job(models["float32"], "the numerics comparison", "its next decode") as turn:  # one turn per decode
            report = compare(models, prompt_ids, int(new_tokens), int(k), drafter, turn=turn,
                             on_progress=lambda done, total, what: bar.progress(done / total, text=f"{what} ({done}/{total})"))
        ids = {t for trace in report.traces for t in trace.ids}
        st.session_state[RESULT_KEY] = NumericsResult(prompt, drafter, report, {t: tokenizer.decode([t]) for t in ids})
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
