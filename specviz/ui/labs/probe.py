"""The race page's probe (pages/race.py): measure a real service from this server (specviz.experiments.probe).

In shared mode only the owner's listed services can be probed (specviz.workshop.probe_urls), at most PROBE_MAX_N
requests of at most max new tokens, within PROBE_DEADLINE_S, and one probe at a time per participant (client address,
as the model queue's rotation). While the room's exercise runs, its services are named A and B (specviz.ui.labs.exercise).
"""

from __future__ import annotations

import contextlib
import json

import streamlit as st

from specviz.experiments.probe import CATEGORIES, ChunkCounter, ProbeResult, ProbeSpec, probe
from specviz.experiments.prompts import load_prompts
from specviz.ui.common import widgets
from specviz.ui.common.access import current_policy
from specviz.ui.common.client import current_client
from specviz.ui.common.models import load_target
from specviz.ui.labs.exercise import PAIR_KEY, or_unreachable, room
from specviz.ui.step_through.sidebar import Settings
from specviz.viz.figures import RUN_COLORS
from specviz.viz.markdown import md_text
from specviz.viz.race import burst_size_figure, gap_histogram
from specviz.workshop.jobs import LongJobs
from specviz.workshop.probe_urls import check_probe_url, guard_for

PROBE_KEY = "specviz_probe"  # this session's latest probe (a ProbeResult)
PROBE_MAX_N = 5  # requests per probe for a participant
PROBE_DEADLINE_S = 120.0  # a participant's whole probe (the owner's: ProbeSpec's default)
LOCAL_URL = "http://127.0.0.1:8000/v1"


_probes = LongJobs()  # client address -> the probe it runs (shared mode): one at a time per participant


def probe_section(config_settings: Settings) -> None:
    """The probe's form and its latest result."""
    policy = current_policy()
    here = room()
    pair = or_unreachable(here.pair, st.session_state.get(PAIR_KEY)) if here is not None else None
    st.header("Measure a real service")
    st.caption("Stream a few answers from any OpenAI-compatible endpoint (`python -m specviz serve`, vLLM, a provider) and read "
               "the timing: a server that speculates commits several tokens per target pass, and its stream comes in bursts.")  # fmt: skip
    allowed = list(policy.probe_urls) if policy.shared else None
    if allowed is not None and not allowed:
        st.info("This shared server probes no services: the person running it lists them in SPECVIZ_PROBE_URLS.")
        return
    labels = {s.url: f"service {s.name}" for s in pair.services} if pair is not None else {}
    max_tokens_cap = min(policy.max_new_tokens, 1024)
    with st.form("probe_form"):
        cols = st.columns([3, 2])
        with cols[0]:
            if allowed is None:
                url = widgets.text_input("base URL", value=LOCAL_URL, key="probe_url", help="The API's base URL, ending in /v1 for most servers.")
            else:
                url = widgets.selectbox("service (this server's list)", allowed, key="probe_url_choice",
                                   format_func=lambda u: f"{labels[u]} · {u}" if u in labels else u)  # fmt: skip
        with cols[1]:
            default_model = config_settings.config.target if config_settings.config is not None else ""
            model = widgets.text_input("model", value=default_model, key="probe_model", max_chars=200, help="The name the endpoint serves (GET /v1/models).")
        cols = st.columns(3)
        category = widgets.on(cols[0]).selectbox("prompts", CATEGORIES, key="probe_category", help="The benchmark's prompts of this kind; copying is where speculation shows most.")
        n = widgets.on(cols[1]).number_input("requests", 1, PROBE_MAX_N if policy.shared else 50, value=3, key="probe_n")
        max_tokens = widgets.on(cols[2]).number_input("max tokens each", 8, max_tokens_cap, value=min(128, max_tokens_cap), key="probe_max_tokens")
        go = st.form_submit_button("📡 Probe")
    if go:
        _probe(str(url), str(model), str(category), int(n), int(max_tokens), allowed, config_settings)
    result: ProbeResult | None = st.session_state.get(PROBE_KEY)
    if result is not None:
        show_probe(result, labels.get(result.spec.base_url))


def _probe(url: str, model: str, category: str, n: int, max_tokens: int, allowed: list[str] | None, config_settings: Settings) -> None:
    try:
        url = check_probe_url(url, allowed)
        if allowed is not None:  # the normalised URL must still be one of the owner's, as written there (labels, reveal)
            url = next((a for a in allowed if check_probe_url(a, None) == url), url)
        shared = current_policy().shared
        spec = ProbeSpec(url, model.strip(), category, n, max_tokens, **({"deadline_s": PROBE_DEADLINE_S} if shared else {}))
        counter = None
        config = config_settings.config
        if config is not None and model.strip() == config.target:  # the model is known: count with its tokenizer
            target = load_target(config)
            counter = ChunkCounter(target.tokenizer, target.name)
        prompts = [p.prompt for p in load_prompts(categories=[category])]
        hold = _probes.hold(current_client().address, "a probe") if shared else contextlib.nullcontext()
        with hold, st.status(f"Probing {md_text(url)}: {n} requests, one after another…", expanded=False) as status:
            result = probe(spec, prompts, counter, guard=guard_for(allowed))
            status.update(label="Probed", state="complete")
    except ValueError as exc:
        st.error(md_text(exc))
        return
    st.session_state[PROBE_KEY] = result


def show_probe(result: ProbeResult, label: str | None = None) -> None:
    report = result.report
    name = label or result.spec.base_url
    box = {"speculating": st.success, "even": st.info}.get(report.verdict, st.warning)
    box(f"**{md_text(name)}**: {md_text(report.summary)}")
    cols = st.columns(4)
    cols[0].metric("τ estimate (tokens per burst)", f"{report.tau:.2f}" if report.tau else "n/a")
    length = result.acceptance_length  # the server's own, beside the bursts' (specviz.experiments.probe.ServerReport)
    cols[1].metric("the server's acceptance length", f"{length['reported']:.2f}" if length["reported"] is not None else "not reported",
                   delta=None if length["difference"] is None else f"{length['difference']:+.2f} bursts − server", delta_color="off",
                   help="Tokens per verify step, the bonus token counted, as the server reports it: vLLM's metrics.speculative_decoding, "
                        "SGLang's spec_accept_length, specviz serve's own. llama.cpp reports a draft acceptance rate only.")  # fmt: skip
    cols[2].metric("tokens/s", f"{report.tokens_per_s:.1f}" if report.tokens_per_s else "n/a", help="After the first chunk, median over the requests.")
    cols[3].metric("time to first token", f"{report.ttft_s:.2f} s" if report.ttft_s else "n/a")
    st.caption(f"{len(result.streams)} requests, {report.tokens} tokens in {report.chunks} chunks; tokens counted as {md_text(result.counted_as)}.")
    st.caption(_reported_note(result))
    cols = st.columns([3, 2])
    with cols[0]:
        st.plotly_chart(gap_histogram([("this service", report.gaps_s, RUN_COLORS[0])], report.threshold.seconds, "Gaps between tokens"), key="probe_gaps")
        st.caption("Bimodal (a hump near zero and one at about a target pass) means bursts; one hump means an even cadence.")
    with cols[1]:
        st.plotly_chart(burst_size_figure(report.sizes), key="probe_sizes")
        st.caption("Speculation's bursts vary from 1 token (the first guess rejected) to k+1; a buffer's are all about one size.")
    with st.expander("What else makes a stream bursty, and how the probe tells"):
        for caveat in report.caveats:
            st.markdown(f"- {md_text(caveat)}")
    st.download_button("⬇ Download the probe (.json)", json.dumps(result.to_json()), file_name="probe.json", mime="application/json", key="probe_download")


def _reported_note(result: ProbeResult) -> str:
    """What the server said of itself, in words: where it was read, the draft acceptance rate, the tokens per target pass."""
    length = result.acceptance_length
    if length["source"] is None:
        return ("The server reported no speculation numbers (vLLM's metrics.speculative_decoding, SGLang's meta_info, llama.cpp's "
                "timings, specviz's usage.specviz), so the bursts are all there is to go on.")  # fmt: skip
    rates = [s.server_report.acceptance_rate for s in result.streams if s.server_report and s.server_report.acceptance_rate is not None]
    details = [f"draft acceptance rate {sum(rates) / len(rates):.2f}"] if rates else []
    if result.server_tau is not None:
        details.append(f"tokens per target pass {result.server_tau:.2f}")
    text = f"The server reported its own numbers ({md_text(length['source'])})" + (": " + ", ".join(details) if details else "") + "."
    if length["difference"] is not None:
        text += (" The τ estimate counts every target pass, the acceptance length only the passes that drafted (a verify step): "
                 "where the drafter often has nothing to offer, τ sits lower, near the tokens per target pass. Past that, a "
                 "difference is the stream's timing: a server or proxy that buffers, or a client that merges chunks.")  # fmt: skip
    return text
