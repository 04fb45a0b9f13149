"""Step through: what happened in each round of speculative decoding, why, and what it bought in time."""

import streamlit as st

from specviz.ui import metrics_views, tree_views
from specviz.ui import replay as recordings
from specviz.ui import step_views as views
from specviz.ui.export_views import export_buttons
from specviz.ui.navigation import route_through_app
from specviz.ui.session import friendly_error, load_target, page_state, start_session, step_session
from specviz.ui.share import share_link
from specviz.ui.sidebar import sidebar
from specviz.viz import legend_html
from specviz.viz.markdown import md_text

route_through_app()  # a fresh server's first request may land here without app.py

settings = sidebar()
share_link(settings)  # mirror the settings in the URL; Copy link in the sidebar
state = page_state()
replay = recordings.replay_state()

st.title("Step through speculative decoding")
st.caption(
    "Each round the drafter guesses up to k tokens; the target scores all of them in one pass; the rule keeps each guess "
    "with probability min(1, p_target/q_draft) until the first rejection, then adds one token of its own (resampled, or a bonus "
    "when every guess survived). The output is distributed exactly as the target alone would sample it."
)

save_slot = recordings.controls(replay)


def show(session) -> None:
    views.divergence_notes(session)  # a greedy run that left plain greedy decoding (bf16 near-ties) says where
    if len(session.runs) == 1:
        run = session.runs[0]
        views.metrics(session, run)
        views.token_stream(session, run)
    else:
        st.html(legend_html())
        for col, run in zip(st.columns(len(session.runs)), session.runs):
            with col:
                st.subheader(md_text(run.label))
                views.metrics(session, run, columns=3)
                views.token_stream(session, run, legend=False)
    if session.num_rounds:
        tree_views.tree_rounds(session)  # token-tree runs only
        views.inspector(session)
        views.curves(session)
        metrics_views.panel(session)
    else:
        st.info("Press **Step** to run the first round.")


def play_round() -> None:
    """Auto-step: one round per tick, then redraw; stop when every run is finished."""
    session = state.session
    if session is None or session.done:
        state.playing = False
        st.rerun(scope="app")
    step_session(session)
    show(session)


def play_replay_round() -> None:
    """Replay's auto-step: one recorded round per tick."""
    session = replay.session
    if session is None or session.done:
        replay.playing = False
        st.rerun(scope="app")
    session.step()
    show(session)


buttons = st.columns([1, 1, 1, 1, 4])
step = buttons[0].button("Step", key="step", type="primary", help="One round: draft, verify in one target pass, commit.")
run_all = buttons[1].button("Run to end", key="run_all", help="Step until EOS or max new tokens, updating as it goes.")
play = buttons[2].button("Pause" if (replay.playing if replay.session else state.playing) else "Play", key="play", help="Step automatically at the pace set in the sidebar.")
reset = buttons[3].button("Reset", key="reset", help="Throw the run away and start again with the current settings.")

if replay.session is not None:  # replay mode: the recorded rounds, no model
    if reset:
        replay.session.reset()
        replay.playing = False
    if play:
        replay.playing = not replay.playing
        st.rerun()
    if step and not replay.playing:
        replay.session.step()
    if run_all:
        replay.session.to_end()
    if replay.playing:
        st.fragment(play_replay_round, run_every=settings.play_every_s)()
    else:
        show(replay.session)
    recordings.save_button(save_slot, replay.session)
    export_buttons(replay.session, playing=replay.playing)  # a recording exports for slides like a live run
    st.stop()

compare_config = None
if settings.error:
    st.error(md_text(settings.error))
else:
    try:
        compare_config = settings.compare_config()
    except ValueError as exc:
        st.error(f"Compare mode: {md_text(exc)}")

if reset:
    state.session, state.playing = None, False
if play:
    state.playing = not state.playing
    st.rerun()  # redraw the button's label

session = state.session
if session is not None and not session.matches(settings.config, compare_config, settings.prompt):
    if session.num_rounds == 0:
        state.session = session = None  # nothing to keep: the next round starts with the new settings
    else:
        changed = session.changes(settings.config, compare_config, settings.prompt)
        st.warning(
            "The settings changed since this run started (" + md_text("; ".join(changed or ["see the sidebar"])) + "). "
            "Step and Run to end continue the run below with its own settings; press **Reset** to start over with the new ones."
        )

target_error = None
if session is None and settings.config is not None:
    try:  # load now, with a visible status, so the first Step is quick and a bad model id shows at once
        load_target(settings.config)
    except Exception as exc:
        target_error = friendly_error(exc)
        st.error(f"Live mode is unavailable: {md_text(target_error)} Recordings still replay without a model: pick an example or open a file above.")

if (step or run_all or state.playing) and session is None:
    if settings.config is None or target_error:
        state.playing = False
    else:
        try:
            state.session = session = start_session(state, settings.config, compare_config, settings.prompt)
        except Exception as exc:
            st.error(md_text(friendly_error(exc)))
            state.playing = False

if session is not None and step and not state.playing:
    step_session(session)

if session is not None and run_all:
    live = st.empty()
    while not session.done and step_session(session):  # False: the model's queue timed out (a warning says so)
        with live.container():
            views.live_progress(session)
    live.empty()


if state.playing and session is not None:
    st.fragment(play_round, run_every=settings.play_every_s)()
elif session is not None:
    show(session)
else:
    st.info("Press **Step** to run the first round, **Run to end** to watch the whole answer, or **Play** to step on a timer.")
recordings.save_button(save_slot, session)

export_buttons(state.session, playing=state.playing)  # HTML and CSV downloads for slides
