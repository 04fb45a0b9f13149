"""Step through: what happened in each round of speculative decoding, why, and what it bought in time."""

import streamlit as st

from specviz.ui.common import timing
from specviz.ui.common.errors import friendly_error
from specviz.ui.common.models import load_target
from specviz.ui.common.navigation import route_through_app
from specviz.ui.room import board, follow, fork, present
from specviz.ui.room.lesson import checklist
from specviz.ui.room.saved_runs import restore_run, step_and_save
from specviz.ui.room.share import restore_from_query, share_link
from specviz.ui.step_through import controls, inspector, metrics_views, tree_views
from specviz.ui.step_through import replay as recordings
from specviz.ui.step_through import step_views as views
from specviz.ui.step_through.export_views import export_buttons
from specviz.ui.step_through.session import page_state
from specviz.ui.step_through.sidebar import sidebar
from specviz.viz import legend_html
from specviz.viz.markdown import md_text

route_through_app()  # a fresh server's first request may land here without app.py

settings = sidebar(restore_from_query())  # a share link's settings seed the widgets before they exist
share_link(settings)  # mirror the settings in the URL; Copy link in the sidebar
state = page_state()
restore_run(state)  # ?run=… after a reload or a replica restart: the run at the same round (specviz/ui/room/saved_runs.py)
presentation = present.current()  # the room's presentation, if any (specviz/ui/room/present.py)
present.sidebar_section(presentation)
fork.make_pending_fork(state)  # Try it yourself from here: the presenter's run as this session's own
replay = recordings.replay_state()

st.html(views.COMPACT_CSS + controls.BAR_CSS)
st.title("Step through speculative decoding", anchor=False)  # no heading link: one Tab fewer between Skip to main content and Step
st.markdown(views.INTRO)

followed = follow.follow_section(presentation)  # the presenter's run while this page follows it
recordings.controls(replay)


def show(session) -> None:
    """The run's views: the cheap ones first (numbers, the stream), then a placeholder where the charts land."""
    views.divergence_notes(session)  # a greedy run that left plain greedy decoding (bf16 near-ties) says where
    inspect_here = None
    if len(session.runs) == 1:
        run = session.runs[0]
        text, inspect_here = st.columns([3, 2]) if session.num_rounds else (st.container(), None)  # stacked on a phone
        with text:
            views.headline(session, run)
            views.token_stream(session, run)
            views.metrics(session, run)
    else:
        st.html(legend_html())
        for col, run in zip(st.columns(len(session.runs)), session.runs):
            with col:
                st.subheader(md_text(run.label))
                views.headline(session, run)
                views.token_stream(session, run, legend=False)
                views.metrics(session, run)
    if not session.num_rounds:
        st.info("Press **Step** to run the first round.")
        return
    if inspect_here is not None:
        with inspect_here:
            inspector.inspector(session, narrow=True)  # beside the text on a wide screen, right under it on a phone
    late = st.empty()
    if views.first_charts(session):  # the skeleton, the first time only: later Steps keep the old charts until replaced
        late.caption("Drawing the curves…")
    with late.container():
        tree_views.tree_rounds(session)  # token-tree runs only
        if inspect_here is None:
            inspector.inspector(session)
        views.curves(session)
        metrics_views.panel(session)


def live_stage() -> controls.LiveStage:
    """Live mode: the sidebar's settings checked and the target loaded (with a visible status). Drawn in full reruns
    only: a Step does not redo it (the stage's notices, inside the fragment, say when the settings moved on)."""
    compare_config = None
    if settings.error:
        st.error(md_text(settings.error))
    else:
        try:
            compare_config = settings.compare_config()
        except ValueError as exc:
            st.error(f"Compare mode: {md_text(exc)}")
    session = state.session
    if session is not None and session.num_rounds == 0 and not session.matches(settings.config, compare_config, settings.prompt):
        session.release()
        state.session = None  # nothing to keep: the next round starts with the new settings
    unavailable = False
    if state.session is None and settings.config is not None:
        try:  # load now, with a visible status, so the first Step is quick and a bad model id shows at once
            load_target(settings.config)
        except Exception as exc:
            unavailable = True
            st.error(f"Live mode is unavailable: {md_text(friendly_error(exc))} Recordings still replay without a model: pick an example or open a file above.")
    # each round is saved (?run=…), then moves a presentation on and adds a fork's board point
    return controls.LiveStage(state, settings.config, compare_config, settings.prompt, unavailable,
                              step=step_and_save, after_round=(present.after_round, fork.after_round))  # fmt: skip


def stage_view(stage) -> None:
    """The controls and the run: a fragment, so a Step, an inspector click or a Play tick reruns only this."""
    with timing.rerun("step-through", fragment=True), follow.one_at_a_time(stage):  # followers take turns
        clicks, save_slot = controls.buttons(stage.playing, disabled=stage.read_only, extra=views.glossary)
        controls.apply(stage, clicks, views.live_progress)
        stage.notices()
        session = stage.session
        if session is not None:
            show(session)
        else:
            st.info("Press **Step** to run the first round, **Run to end** to watch the whole answer, or **Play** to step on a timer.")
        recordings.save_button(save_slot, session)
        export_buttons(session, playing=stage.playing)  # HTML and CSV downloads for slides (a recording's too)


if followed is not None:
    stage = followed
else:
    stage = controls.ReplayStage(replay) if replay.session is not None else live_stage()
st.fragment(stage_view, run_every=settings.play_every_s if stage.playing else None)(stage)
st.divider()
checklist(__file__)  # this page's lesson task (docs/lesson-45min.md): below the run, so the Step's result stays in view
recordings.pickers(replay)  # below the run: the first screen is the Step and its result
board.board_section(presentation)  # the room's forks, for the presenter (and the room once shown)
follow.watch()  # reruns the page when the presentation moves on, starts or stops
