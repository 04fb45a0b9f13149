"""The step-through page's controls, written once for live runs and replays: Step, Run to end, Play / Pause, Reset.

A Stage says what each control does to its session (LiveStage: rounds of the model, in the model's queue;
ReplayStage: a recording's rounds, no model); buttons() draws the row, apply() acts on the clicks. The page draws
them inside a fragment (st.fragment), so a Step reruns the buttons and the run's views only, not the sidebar or the
recordings row. Play re-registers the fragment with run_every (a full rerun), one round per tick."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import streamlit as st

from specviz.config import RunConfig
from specviz.ui.common.errors import friendly_error
from specviz.ui.step_through.replay import ReplaySession, ReplayState
from specviz.ui.step_through.session import PageState, StepSession, start_session
from specviz.viz.markdown import md_text


class Stage(Protocol):
    """What the controls act on."""

    playing: bool
    read_only: bool  # the controls are drawn disabled and do nothing (a follower's view of the presenter's run)

    @property
    def session(self) -> StepSession | ReplaySession | None: ...
    def ready(self) -> bool: ...  # make the session if there is none (live: the first Step starts it); False: cannot
    def notices(self) -> None: ...  # what the page says about the session after the clicks (drawn in the fragment)
    def step(self) -> bool: ...  # one round; False when it could not run (the model's queue timed out)
    def run_to_end(self, progress: Callable[[object], None]) -> None: ...
    def reset(self) -> None: ...


@dataclass(frozen=True)
class Clicks:
    step: bool = False
    run_all: bool = False
    play: bool = False
    reset: bool = False


SHORTCUTS = {"step": "S", "play": "P", "reset": "Shift+X"}  # Streamlit reserves C and R; a key typed into a field is not a shortcut
ICONS = {"step": ":material/skip_next:", "run_all": ":material/fast_forward:", "play": ":material/play_arrow:", "pause": ":material/pause:",
         "reset": ":material/restart_alt:"}  # fmt: skip; Save run's is replay.SAVE_ICON
ICON_ONLY_ON_PHONE = ("run_all", "play", "reset", "save_run")  # Step keeps its word; the others' words stay for screen readers
NARROW_PX, PHONE_PX = 1100, 640  # window widths: a small laptop's (1024) column, a phone's
# The row stays one row at every width. Wide: icon, word and shortcut hint. Narrow (a small laptop, whose column is
# ~550 px with the sidebar open): words only, no icons, no hints (each button's help names its key). A phone: Step's
# icon and word, the others' icons only (their words clipped out of sight, not removed, so each stays the button's
# accessible name), no popover chevron.
_ROW = ".st-key-step_controls"
BAR_CSS = (
    f"<style>@media (max-width:{NARROW_PX}px){{{_ROW} kbd{{display:none;}}}}"
    f"@media (min-width:{PHONE_PX + 1}px) and (max-width:{NARROW_PX}px){{{_ROW} button span:has(> [data-testid='stIconMaterial']){{display:none;}}}}"
    f"@media (max-width:{PHONE_PX}px){{{_ROW} [data-testid='stPopoverButton'] div[aria-hidden='true']{{display:none;}}"
    + ",".join(f".st-key-{key} button [data-testid='stMarkdownContainer']" for key in ICON_ONLY_ON_PHONE)
    + "{position:absolute;width:1px;height:1px;overflow:hidden;clip-path:inset(50%);white-space:nowrap;}}</style>"
)


def _help(text: str, key: str) -> str:
    return f"{text} Keyboard: {SHORTCUTS[key]}."


def buttons(playing: bool, disabled: bool = False, extra: Callable[[], None] | None = None) -> tuple[Clicks, object]:
    """The row: Step, Run to end, Play/Pause, Reset, what extra draws (the page's glossary), and a slot for Save run
    (the caller fills it after the round). disabled: drawn read-only (the stage's notices say why). Step, Play and
    Reset have keyboard shortcuts (SHORTCUTS)."""
    with st.container(horizontal=True, gap="small", key="step_controls"):  # one row, also on a phone (columns would stack)
        clicks = Clicks(
            step=st.button("Step", key="step", type="primary", disabled=disabled, shortcut=SHORTCUTS["step"], icon=ICONS["step"],
                           help=_help("One round: draft, verify in one target pass, commit.", "step")),
            run_all=st.button("Run to end", key="run_all", disabled=disabled, icon=ICONS["run_all"],
                              help="Run to end: step until EOS or max new tokens, updating as it goes."),
            play=st.button("Pause" if playing else "Play", key="play", disabled=disabled, shortcut=SHORTCUTS["play"],
                           icon=ICONS["pause" if playing else "play"],
                           help=_help(("Pause: stop" if playing else "Play: step") + " automatically at the pace set in the sidebar.", "play")),
            reset=st.button("Reset", key="reset", disabled=disabled, shortcut=SHORTCUTS["reset"], icon=ICONS["reset"],
                            help=_help("Reset: throw the run away and start again with the current settings.", "reset")),
        )  # fmt: skip
        if extra is not None:
            extra()
        return clicks, st.empty()


def apply(stage: Stage, clicks: Clicks, progress: Callable[[object], None]) -> None:
    """Act on the clicks (and, while playing, take this tick's round). Play restarts the page (scope app) so the
    fragment is registered again with or without its timer; Step, Run to end and Reset stay inside the fragment.
    A read-only stage ignores every click (a raw client can send a disabled button's click)."""
    if stage.read_only:
        return
    if clicks.reset:
        stage.reset()
    if clicks.play:
        stage.playing = not stage.playing
        st.rerun(scope="app")
    if not (clicks.step or clicks.run_all or stage.playing):
        return
    if not stage.ready():
        if stage.playing:
            stage.playing = False
        return
    session = stage.session
    if stage.playing:
        if session.done:
            stage.playing = False
            st.rerun(scope="app")  # stop the timer
        stage.step()
    elif clicks.step:
        stage.step()
    if clicks.run_all:
        stage.run_to_end(progress)


class HeldStage:
    """What every stage reads from the page's state: its session (None before the first round) and whether Play is on."""

    state: ReplayState | PageState

    @property
    def session(self) -> ReplaySession | StepSession | None:
        return self.state.session

    @property
    def playing(self) -> bool:
        return self.state.playing

    @playing.setter
    def playing(self, value: bool) -> None:
        self.state.playing = value


class ReplayStage(HeldStage):
    """A recording walked round by round."""

    read_only = False

    def __init__(self, state: ReplayState) -> None:
        self.state = state

    def ready(self) -> bool:
        return self.state.session is not None

    def notices(self) -> None:
        pass

    def step(self) -> bool:
        self.state.session.step()
        return True

    def run_to_end(self, progress: Callable[[object], None]) -> None:
        self.state.session.to_end()

    def reset(self) -> None:
        if self.state.session is not None:
            self.state.session.reset()
        self.state.playing = False


class LiveStage(HeldStage):
    """Rounds of the model: the first Step (or Run to end, or Play) starts the session with the sidebar's settings.
    The page hands the stage what a round means beyond the model: step (a round, and what keeps it: the room's
    specviz.ui.room.saved_runs.step_and_save) and after_round (run after each round that ran: the room's presentation
    and fork board, specviz.ui.room.present.after_round and fork.after_round). The stage itself knows no room."""

    read_only = False

    def __init__(
        self,
        state: PageState,
        config: RunConfig | None,
        compare: RunConfig | None,
        prompt: str,
        unavailable: bool = False,
        *,
        step: Callable[[StepSession], bool],
        after_round: Sequence[Callable[[StepSession], None]] = (),
    ) -> None:
        self.state, self.config, self.compare, self.prompt = state, config, compare, prompt
        self.unavailable = unavailable  # the target could not be loaded (the page said why)
        self.step_round, self.after_round = step, tuple(after_round)

    def ready(self) -> bool:
        if self.state.session is not None:
            return True
        if self.config is None or self.unavailable:
            return False
        try:
            self.state.session = start_session(self.state, self.config, self.compare, self.prompt)
        except Exception as exc:
            st.error(md_text(friendly_error(exc)))
            return False
        return True

    def notices(self) -> None:
        """A run whose settings the sidebar has moved on from: say what changed and offer Reset."""
        session = self.state.session
        if session is None or self.config is None or session.matches(self.config, self.compare, self.prompt):
            return
        changed = session.changes(self.config, self.compare, self.prompt)
        st.warning(
            "The settings changed since this run started (" + md_text("; ".join(changed or ["see the sidebar"])) + "). "
            "Step and Run to end continue the run below with its own settings; press **Reset** to start over with the new ones."
        )

    def step(self) -> bool:
        ran = not self.state.session.done  # a Step of finished runs adds nothing: no file, no board point
        stepped = self.step_round(self.state.session)
        if stepped and ran:
            for hook in self.after_round:
                hook(self.state.session)
        return stepped

    def run_to_end(self, progress: Callable[[object], None]) -> None:
        session = self.state.session
        live = st.empty()
        while not session.done and self.step():  # False: the model's queue timed out (a warning says so)
            with live.container():
                progress(session)
        live.empty()

    def reset(self) -> None:
        if self.state.session is not None:
            self.state.session.release()  # its share of the server's KV budget
        self.state.session, self.state.playing = None, False
