"""The race page's side (pages/race.py): the race (two lanes, one clock), measuring a real service, and the room exercise.

* The race: the sidebar's settings (the step-through sidebar, without compare mode and Play's pace) decoded plainly and
  speculatively, each alone, in model turns of a few passes (specviz.experiments.race through turns.long_job, so a
  shared server's participants' Steps get in between, the lanes' clocks leave those waits out, and one participant runs
  one job at a time). The result is a plain record kept in the
  session; the playback (specviz.viz.playback) runs in the browser, so a saved race or the presenter's race plays with
  no model.
* Measure a real service: the probe (specviz.experiments.probe) from this server. In shared mode only the owner's
  listed services can be probed (specviz.workshop.probe_urls), at most PROBE_MAX_N requests of at most max new tokens,
  within PROBE_DEADLINE_S, and one probe at a time per participant (client address, as the model queue's rotation).
* The room (specviz.workshop.race_room): with the presenter key, *Show this race to the room* makes every page play
  it; `serve-pair` starts the exercise *Which service speculates?*, whose guesses the room board counts and whose
  truth the presenter reveals. While the room's store cannot be reached the page says so (UNREACHABLE_TEXT), a
  participant's guess stays on the page (GUESS_PENDING_KEY) and is sent again on each run until the store takes it,
  and the presenter's buttons say the store is unreachable.
"""

from __future__ import annotations

import contextlib
import json
import secrets

import streamlit as st

from specviz.config import validate_prompt
from specviz.core.race import MAX_FILE_BYTES, RaceResult
from specviz.experiments.probe import CATEGORIES, ChunkCounter, ProbeResult, ProbeSpec, probe
from specviz.experiments.prompts import load_prompts
from specviz.experiments.race import run_race
from specviz.runs import kv_tokens
from specviz.ui.common import backmsgs, budgets, widgets
from specviz.ui.common.access import current_policy
from specviz.ui.common.client import current_client
from specviz.ui.common.models import run_models
from specviz.ui.common.settings import presenter_key_setting
from specviz.ui.common.turns import long_job
from specviz.ui.room import present
from specviz.ui.room.saved_runs import run_store
from specviz.ui.step_through.session import TokenTexts, friendly_error, load_target
from specviz.ui.step_through.sidebar import Settings, sidebar
from specviz.viz.figures import RUN_COLORS
from specviz.viz.markdown import md_code, md_text
from specviz.viz.metrics import HISTOGRAM_CAPTION, histogram_figure, histogram_frame
from specviz.viz.playback import playback_html
from specviz.viz.race import burst_size_figure, gap_histogram, gap_series, lane_frame
from specviz.workshop.jobs import LongJobs
from specviz.workshop.probe_urls import check_probe_url, guard_for
from specviz.workshop.race_room import NAMES, RaceRoom, voter_id
from specviz.workshop.saved_runs import write_problem
from specviz.workshop.store import StoreUnavailable

RACE_KEY = "specviz_race"  # this session's latest race (a RaceResult)
PROBE_KEY = "specviz_probe"  # this session's latest probe (a ProbeResult)
PROBE_MAX_N = 5  # requests per probe for a participant
PROBE_DEADLINE_S = 120.0  # a participant's whole probe (the owner's: ProbeSpec's default)
WATCH_EVERY_S = 3.0  # how often a page looks whether the presenter showed a race, or the exercise moved on
SEEN_KEY = "specviz_race_room_seen"  # the room files' stamp this page last drew
GUESS_PENDING_KEY = "specviz_race_guess_pending"  # (pair id, guess) submitted while the store was unreachable
PAIR_KEY = "specviz_race_pair"  # the exercise this page last read (drawn from it while the store is unreachable)
UNREACHABLE_SAID_KEY = "specviz_race_unreachable_said"  # this page run said the store is unreachable already
UNREACHABLE_TEXT = ("The room's store is unreachable: the presenter's race and the exercise show again when it is back "
                    "(this page looks every few seconds). Your own race and probes work as usual.")  # fmt: skip
PLAYER_HEIGHT = 450
LOCAL_URL = "http://127.0.0.1:8000/v1"


_probes = LongJobs()  # client address -> the probe it runs (shared mode): one at a time per participant


def settings() -> Settings:
    return sidebar(with_compare=False, with_play=False)


def room() -> RaceRoom | None:
    runs = run_store()
    return None if runs is None else RaceRoom(runs.store)


# --- the race ------------------------------------------------------------------------------------------------


def _unreachable() -> None:
    """Say once per page run that the room's store is unreachable."""
    if not st.session_state.get(UNREACHABLE_SAID_KEY):
        st.session_state[UNREACHABLE_SAID_KEY] = True
        st.warning(UNREACHABLE_TEXT, icon="🎓")


def _or(read, default=None):
    """read(), or default while the room's store is unreachable (the page says so)."""
    try:
        return read()
    except StoreUnavailable:
        _unreachable()
        return default


def race_section(config_settings: Settings) -> None:
    """Start a race, open a saved one, or follow the presenter's; then draw whichever is chosen."""
    st.session_state[UNREACHABLE_SAID_KEY] = False  # the page's first room section: a new run says it anew
    here = room()
    shown = _or(here.race) if here is not None else None
    cols = st.columns([1, 2])
    with cols[0]:
        start = st.button("🏁 Start the race", key="race_start", type="primary", disabled=config_settings.config is None,
                          help="Plain decoding, then speculative decoding, each alone on the model; then both play back on one clock.")  # fmt: skip
    with cols[1]:
        _open_saved()
    if config_settings.error:
        st.error(md_text(config_settings.error))
    if start and config_settings.config is not None:
        _run(config_settings)
    mine: RaceResult | None = st.session_state.get(RACE_KEY)
    race = mine
    if shown is not None:
        choice = widgets.radio("Show", ["the presenter's race", "my race"], key="race_source", horizontal=True, index=0 if mine is None else 1,
                               help="The presenter showed a race to the room; it plays here without the model.")  # fmt: skip
        race = shown if choice == "the presenter's race" or mine is None else mine
    if race is None:
        st.info("Press **Start the race** to decode the sidebar's prompt plainly and speculatively, or open a saved race.")
        return
    show_race(race)
    _presenter_controls(here, race, shown)


def _run(config_settings: Settings) -> None:
    config, prompt = config_settings.config, config_settings.prompt
    try:
        validate_prompt(prompt)
        target = load_target(config)
        models = run_models(config, target=target)
        prompt_ids = budgets.prompt_ids(target, prompt, config.chat, config.max_new_tokens, config.num_draft_tokens)  # the owner's token budget
        memory = max(kv_tokens(config, models, len(prompt_ids)), kv_tokens(config, models, len(prompt_ids), baseline=True))  # one lane at a time
        with st.status("Racing: plain decoding, then speculative decoding, each alone…", expanded=False) as status:
            with budgets.job_memory(target, memory, "The race"), long_job(target, "a race", "the race") as turn:
                race = run_race(config, models, prompt, prompt_ids, TokenTexts(target.tokenizer), turn=turn)
            status.update(label="Raced: both lanes measured", state="complete")
    except Exception as exc:
        st.error(md_text(friendly_error(exc)))
        return
    st.session_state[RACE_KEY] = race


def _open_saved() -> None:
    backmsgs.expect_upload(MAX_FILE_BYTES)  # shared mode: a larger file is refused before Streamlit keeps it
    upload = st.file_uploader("Open a saved race (.json)", type=["json"], key="race_file", max_upload_size=MAX_FILE_BYTES // 2**20,
                              help="A race downloaded from this page plays back without a model.")  # fmt: skip
    if upload is None:
        return
    data = upload.getvalue()
    try:
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"The file is {len(data):,} bytes; a race is at most {MAX_FILE_BYTES:,}.")
        race = RaceResult.from_json(json.loads(data))
    except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        st.error(f"This file is not a race specviz can play: {md_text(exc)}")
        return
    if st.session_state.get("race_file_seen") != upload.file_id:
        st.session_state["race_file_seen"] = upload.file_id
        st.session_state[RACE_KEY] = race


def show_race(race: RaceResult) -> None:
    """The numbers, the playback, identical text, the gap histograms and the download."""
    plain, spec = race.plain, race.speculative
    speedup = race.speedup
    cols = st.columns(4)
    cols[0].metric("faster (time to last token)", f"{speedup:.2f}×" if speedup else "n/a",
                   help="Plain decoding's time to its last token ÷ speculative decoding's, same prompt, seed and target.")  # fmt: skip
    cols[1].metric("tokens per target pass", f"{spec.tokens_per_pass:.2f}" if spec.tokens_per_pass else "n/a",
                   help="Speculative lane: tokens ÷ verify passes. Plain decoding commits exactly one per pass.")  # fmt: skip
    cols[2].metric("plain: first / last token", f"{plain.ttft_s:.2f} / {plain.last_s:.2f} s")
    cols[3].metric("speculative: first / last token", f"{spec.ttft_s:.2f} / {spec.last_s:.2f} s")
    st.iframe(playback_html(race), height=PLAYER_HEIGHT, alt="The race played back: both lanes on one clock")
    st.caption(
        "Both lanes replay at the speed they were measured (1×) or slowed down. The plain lane grows one token per target "
        "pass, evenly; the speculative lane jumps several tokens at once (a round's kept guesses plus the target's own token) "
        "and then pauses for the next round. The marks under each lane are its commits on the shared clock: their height is "
        "the tokens each carried."
    )
    _identical_note(race)
    st.dataframe(lane_frame(race), hide_index=True, column_config={
        c: st.column_config.NumberColumn(format="%.3f") for c in ("time to first token (s)", "time to last token (s)")
    } | {c: st.column_config.NumberColumn(format="%.2f") for c in ("tokens/s", "tokens per pass")}
      | {c: st.column_config.NumberColumn(format="percent") for c in ("gaps < 1 ms", "gaps > 10 ms")})  # fmt: skip
    report = spec.bursts()
    st.plotly_chart(gap_histogram(gap_series(race), report.threshold.seconds, "Gaps between consecutive tokens"), key="race_gaps")
    st.caption(
        "Each lane's gaps between consecutive tokens, on a log scale. Plain decoding's sit in one hump, about one target pass "
        "each. The speculative lane's split in two: near zero inside a round (its tokens arrived together; a zero gap is drawn "
        "at 1 µs) and about one round apart. That bimodal shape is what speculation looks like from outside; the dashed line is "
        f"the burst threshold the analysis took from the data. Reading the speculative lane alone: {md_text(report.summary)}"
    )
    if spec.spec_decode is not None and spec.spec_decode.num_spec_steps:  # a race saved before lanes carried their steps has none
        st.plotly_chart(histogram_figure(histogram_frame({spec.label: spec.spec_decode.acceptance_histogram})), key="race_acceptance_histogram")
        st.caption(f"The speculative lane. {HISTOGRAM_CAPTION}")
    machine = race.machine
    st.caption(
        f"{md_text(race.target)} ({md_text(race.precision)}) on {md_text(machine.get('device', '?'))}, {md_text(machine.get('threads', '?'))} "
        f"threads; load average {md_text(machine.get('load_average_before', '?'))} before, {md_text(machine.get('load_average_after', '?'))} "
        "after. Each lane ran alone; its clock leaves out the time the engine spends building its chart records."
    )
    st.download_button("⬇ Download this race (.json)", json.dumps(race.to_json()), file_name="race.json", mime="application/json", key="race_download")


def _identical_note(race: RaceResult) -> None:
    n = race.plain.num_tokens
    if race.greedy and race.identical:
        st.success(f"**Identical text.** At temperature 0 both lanes committed the same {n} token ids: speculative decoding "
                   "keeps only the tokens the target would have chosen itself, so it changes the speed, never the answer.")  # fmt: skip
    elif race.greedy:
        st.warning(f"The lanes differ from new token {race.first_difference}. At temperature 0 they are identical in float32; in a "
                   "lower precision the target's top two tokens can be a near-tie that a verify pass and a one-token pass break "
                   "differently (docs/precision.md).")  # fmt: skip
    else:
        st.info("**Two samples, one distribution.** At temperature above 0 each lane draws its tokens at random. The same seed "
                "does not give the same text: the speculative lane spends its random numbers on accepting or rejecting guesses "
                "and on resampling, plain decoding on sampling each token, so the draws fall differently. Each answer is still a "
                "sample of exactly the target's distribution; set temperature 0 to see identical text.")  # fmt: skip


def _key_ok(key_widget: str) -> bool:
    """The presenter key typed in key_widget, checked as the step-through page checks it (the room's wrong-key limits,
    specviz.ui.room.present.key_given); the field is emptied and a refusal is said in the race's expander."""
    return present.key_given(key_widget, lambda kind, text: st.session_state.__setitem__("race_room_message", text))


def _presenter_write(write) -> None:
    """A presenter's change to the room (a callback): a store that cannot take it is said in the expander."""
    try:
        write()
    except OSError as exc:
        st.session_state["race_room_message"] = f"The room did not get this: {write_problem(exc)}. Press the button again when it is back."


def _presenter_controls(here: RaceRoom | None, race: RaceResult, shown: RaceResult | None) -> None:
    if here is None or presenter_key_setting() is None:
        return

    def show() -> None:
        if _key_ok("race_present_key"):
            _presenter_write(lambda: here.show_race(race))

    def hide() -> None:
        if _key_ok("race_present_key"):
            _presenter_write(here.hide_race)

    with st.sidebar.expander("Show the race to the room", expanded=False):
        widgets.text_input("presenter key", type="password", key="race_present_key")
        st.button("Show this race to the room", key="race_show", on_click=show)
        if shown is not None:
            st.button("Stop showing it", key="race_hide", on_click=hide)
        if message := st.session_state.pop("race_room_message", None):
            st.warning(md_text(message))


# --- measuring a real service ---------------------------------------------------------------------------------------


def probe_section(config_settings: Settings) -> None:
    """The probe's form and its latest result."""
    policy = current_policy()
    here = room()
    pair = _or(here.pair, st.session_state.get(PAIR_KEY)) if here is not None else None
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


# --- the room exercise -------------------------------------------------------------------------------------------------


def exercise_section() -> None:
    """Which service speculates? Shown while `serve-pair` runs (its truth is on the room's store); while the store is
    unreachable, the exercise this page last read, so a guess can still be made (and is sent when the store is back)."""
    here = room()
    if here is None:
        return
    pair = _or(here.pair, st.session_state.get(PAIR_KEY))
    st.session_state[PAIR_KEY] = pair
    if pair is not None:
        _exercise(here, pair)


def _send_pending_guess(here: RaceRoom, pair, voter: str) -> None:
    """A guess submitted while the store was unreachable, sent now; while it still is, kept (and said)."""
    pending = st.session_state.get(GUESS_PENDING_KEY)
    if pending is None or pending[0] != pair.id:
        st.session_state.pop(GUESS_PENDING_KEY, None)
        return
    try:
        here.guess(pair.id, voter, pending[1])
    except StoreUnavailable:
        _unreachable()
        st.caption(f"Your guess (service {pending[1]}) waits for the room's store: it is sent when the store is back.")
        return
    st.session_state.pop(GUESS_PENDING_KEY, None)


def _exercise(here: RaceRoom, pair) -> None:
    st.header("Which service speculates?")
    st.caption(
        "Two services answer with the same model and the same text; one of them speculates. Probe each above (service A, "
        "service B), look at the gaps and the bursts, then guess. The board shows the room's guesses; the presenter reveals "
        "the answer."
    )
    revealed = _or(lambda: here.revealed(pair.id), False)
    if not revealed:  # guesses close when the answer is out
        voter = voter_id(st.session_state.setdefault("race_voter", secrets.token_hex(16)))  # anonymous, one per browser session
        _send_pending_guess(here, pair, voter)
        pending = st.session_state.get(GUESS_PENDING_KEY)
        mine = pending[1] if pending is not None else _or(lambda: here.guesses(pair.id).get(voter))
        cols = st.columns([2, 1])
        with cols[0]:
            guess = widgets.radio("My guess: the one that speculates is", [f"service {n}" for n in NAMES], key="race_guess", horizontal=True,
                                  index=NAMES.index(mine) if mine else 0)  # fmt: skip
        with cols[1]:
            if st.button("Submit my guess", key="race_guess_submit"):
                mine = str(guess).removeprefix("service ")
                st.session_state[GUESS_PENDING_KEY] = (pair.id, mine)  # kept until the store takes it
                _send_pending_guess(here, pair, voter)
        if mine:
            st.caption(f"Your guess: service {mine} (submit again to change it).")
    st.fragment(_board, run_every=None if revealed else WATCH_EVERY_S)(here, pair)
    if not revealed and presenter_key_setting() is not None:

        def reveal() -> None:
            if _key_ok("race_reveal_key"):
                _presenter_write(lambda: here.reveal(pair.id))

        with st.expander("Reveal the answer (presenter)"):
            widgets.text_input("presenter key", type="password", key="race_reveal_key")
            st.button("Reveal", key="race_reveal", on_click=reveal)
            if message := st.session_state.pop("race_room_message", None):
                st.warning(md_text(message))


def _board(here: RaceRoom, pair) -> None:
    """The room's guesses (a fragment: it reads the guesses again every few seconds, redrawing only itself)."""
    try:
        tally, revealed = here.tally(pair.id), here.revealed(pair.id)
    except StoreUnavailable:
        st.caption("The room's guesses show again when the room's store is back.")
        return
    total = sum(tally.values())
    cols = st.columns(3)
    for col, name in zip(cols, NAMES):
        col.metric(f"guessed service {name}", tally[name])
    if revealed:
        answer = pair.answer
        drafter = next(s.drafter for s in pair.services if s.speculates)
        st.success(f"**Service {answer} speculates** (drafter {md_code(drafter)}); the other decodes plainly. "
                   f"{tally[answer]} of {total} guessed right.")  # fmt: skip
        cols[2].metric("right", f"{tally[answer]} / {total}")


def watch() -> None:
    """Rerun the page when the presenter shows or hides a race, or an exercise starts or is revealed (a fragment that
    compares the room files' stamp every WATCH_EVERY_S; no model time). Only on a server with a presenter key."""
    here = room()
    if here is None or presenter_key_setting() is None:
        return
    st.session_state[SEEN_KEY] = _stamp(here)  # what this run drew

    def look() -> None:
        if _stamp(here) != st.session_state.get(SEEN_KEY):
            st.rerun()

    st.fragment(look, run_every=WATCH_EVERY_S)()


def _stamp(here: RaceRoom) -> object:
    """The room records' stamp, or "unreachable" (so the page reruns when the store goes away and when it is back)."""
    try:
        return here.stamp()
    except StoreUnavailable:
        return "unreachable"
