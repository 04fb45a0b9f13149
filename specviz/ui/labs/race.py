"""The race page's race (pages/race.py): two lanes, one clock.

The sidebar's settings (the step-through sidebar, without compare mode and Play's pace) decoded plainly and
speculatively, each alone, in model turns of a few passes (specviz.experiments.race through turns.long_job, so a shared
server's participants' Steps get in between, the lanes' clocks leave those waits out, and one participant runs one job at
a time). The result is a plain record kept in the session; the playback (specviz.viz.playback) runs in the browser, so a
saved race or the presenter's race plays with no model. With the presenter key, *Show this race to the room* makes every
page play it (the room's side: specviz.ui.labs.exercise). The page's other sections: specviz.ui.labs.probe (measure a
real service) and specviz.ui.labs.exercise (Which service speculates?).
"""

from __future__ import annotations

import json

import streamlit as st

from specviz.config import validate_prompt
from specviz.core.race import MAX_FILE_BYTES, RaceResult
from specviz.experiments.race import run_race
from specviz.runs import kv_tokens
from specviz.ui.common import backmsgs, budgets, widgets
from specviz.ui.common.errors import friendly_error
from specviz.ui.common.models import TokenTexts, load_target, run_models
from specviz.ui.common.settings import presenter_key_setting
from specviz.ui.common.turns import long_job
from specviz.ui.labs.exercise import UNREACHABLE_SAID_KEY, key_ok, or_unreachable, presenter_write, room
from specviz.ui.room.share import restore_from_query
from specviz.ui.step_through.sidebar import Settings, sidebar
from specviz.viz.markdown import md_text
from specviz.viz.metrics import HISTOGRAM_CAPTION, histogram_figure, histogram_frame
from specviz.viz.playback import playback_html
from specviz.viz.race import gap_histogram, gap_series, lane_frame
from specviz.workshop.race_room import RaceRoom

RACE_KEY = "specviz_race"  # this session's latest race (a RaceResult)
PLAYER_HEIGHT = 450


def settings() -> Settings:
    return sidebar(restore_from_query(), with_compare=False, with_play=False)  # a share link's settings, as on step-through


def race_section(config_settings: Settings) -> None:
    """Start a race, open a saved one, or follow the presenter's; then draw whichever is chosen."""
    st.session_state[UNREACHABLE_SAID_KEY] = False  # the page's first room section: a new run says it anew
    here = room()
    shown = or_unreachable(here.race) if here is not None else None
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
        prompt_ids = budgets.prompt_ids(target, prompt, config.chat, config.max_new_tokens, config.k_ceiling)  # the owner's token budget
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
    cols[1].metric("tokens per target pass", f"{spec.tokens_per_target_pass:.2f}" if spec.tokens_per_target_pass else "n/a",
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
    } | {c: st.column_config.NumberColumn(format="%.2f") for c in ("tokens/s", "tokens per target pass")}
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


def _presenter_controls(here: RaceRoom | None, race: RaceResult, shown: RaceResult | None) -> None:
    if here is None or presenter_key_setting() is None:
        return

    def show() -> None:
        if key_ok("race_present_key"):
            presenter_write(lambda: here.show_race(race))

    def hide() -> None:
        if key_ok("race_present_key"):
            presenter_write(here.hide_race)

    with st.sidebar.expander("Show the race to the room", expanded=False):
        widgets.text_input("presenter key", type="password", key="race_present_key")
        st.button("Show this race to the room", key="race_show", on_click=show)
        if shown is not None:
            st.button("Stop showing it", key="race_hide", on_click=hide)
        if message := st.session_state.pop("race_room_message", None):
            st.warning(md_text(message))
