"""Replay mode of the step-through page: a recording's rounds walked by Step / Run to end / Play / Reset, with
no model loaded. The views read a ReplaySession exactly as they read a live StepSession (step_views.ViewSource).

Also: the example recordings menu (assets/recordings/), opening an upload, and saving a live session."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from specviz.config import RunConfig
from specviz.core.records import StepRecord
from specviz.recording.build import build_recording, dumps, now_utc, recorded_run
from specviz.recording.load import MAX_BYTES, load_recording, read_recording
from specviz.recording.schema import RecordedRun, Recording
from specviz.ui.common import backmsgs, widgets
from specviz.ui.common.models import load_target
from specviz.ui.step_through.session import StepSession
from specviz.viz.figures import BASELINE_RUN
from specviz.viz.markdown import md_text
from specviz.workshop.resources import cached

log = logging.getLogger(__name__)

REPLAY_KEY = "specviz_replay"
EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "assets" / "recordings"
NO_EXAMPLE = "—"
MAX_UPLOAD_MB = MAX_BYTES // 2**20
SAVE_ICON = ":material/download:"  # Save run, in the control row (icon only on a phone: controls.BAR_CSS)


@dataclass
class ReplayRun:
    """One recorded run, shown up to `shown` rounds."""

    label: str
    config: RunConfig
    all_records: tuple[StepRecord, ...]
    recorded_error: str | None = None
    shown: int = 0
    device_type: str = "cpu"  # where it was recorded (the recording's environment)

    @property
    def records(self) -> list[StepRecord]:
        return list(self.all_records[: self.shown])

    @property
    def error(self) -> str | None:
        return self.recorded_error if self.shown >= len(self.all_records) else None

    @property
    def done(self) -> bool:
        return self.shown >= len(self.all_records)


@dataclass(frozen=True)
class ReplayBaseline:
    records: list[StepRecord]
    error: str | None

    def covers(self, num_tokens: int) -> bool:
        return True  # a recording's baseline is as far as it will ever be


@dataclass
class ReplaySession:
    """A recording being walked through round by round. `shown` rounds of every run are visible."""

    recording: Recording
    source: str  # "example: <file>" or "upload: <file name>"
    runs: list[ReplayRun]
    shown: int = 0
    memo: dict = field(default_factory=dict, repr=False, compare=False)  # frames and figures per round (specviz.ui.common.memo)

    @classmethod
    def open(cls, recording: Recording, source: str, shown: int = 1) -> ReplaySession:
        device_type = recording.environment.device.split(":")[0]
        runs = [ReplayRun(r.label, r.config, r.records, r.error, device_type=device_type) for r in recording.runs]
        session = cls(recording, source, runs)
        session.seek(shown)
        return session

    @property
    def prompt(self) -> str:
        return self.recording.prompt

    @property
    def config(self) -> RunConfig:
        return self.recording.runs[0].config

    @property
    def total_rounds(self) -> int:
        return max(len(r.all_records) for r in self.runs)

    @property
    def num_rounds(self) -> int:
        return max(len(r.records) for r in self.runs)

    @property
    def done(self) -> bool:
        return self.shown >= self.total_rounds

    def seek(self, rounds: int) -> None:
        self.shown = max(0, min(rounds, self.total_rounds))
        for run in self.runs:
            run.shown = self.shown

    def step(self) -> None:
        self.seek(self.shown + 1)

    def to_end(self) -> None:
        self.seek(self.total_rounds)

    def reset(self) -> None:
        self.seek(0)

    @property
    def baseline(self) -> ReplayBaseline:
        """The recorded baseline as far as the rounds shown need it (as many tokens as the longest run so far), so
        the speedup of every round shown is the measured one."""
        base = self.recording.baseline
        if base is None:
            return ReplayBaseline([], "This recording has no baseline (plain decoding), so no measured speedup.")
        needed = max(sum(len(r.emitted) for r in run.records) for run in self.runs)
        records, tokens = [], 0
        for r in base.records:
            if tokens >= needed:
                break
            records.append(r)
            tokens += len(r.emitted)
        error = base.error if len(records) == len(base.records) else None
        return ReplayBaseline(records, error)

    @property
    def prompt_texts(self) -> list[str]:
        return [self.recording.token_text(t) for t in self.recording.prompt_ids]

    def token_text(self, token_id: int) -> str:
        return self.recording.token_text(token_id)

    def banner(self) -> str:
        """Markdown; everything from the file is escaped (a title could hold links, images or HTML)."""
        rec = self.recording
        runs = " and ".join(f"**{md_text(r.label)}**" for r in rec.runs)
        title = f"“{md_text(rec.title)}” — " if rec.title else ""
        return (
            f"**Replay** of {md_text(self.source)}: {title}{runs}, recorded with {md_text(rec.describe())}. "
            "No model is loaded: Step, Run to end, Play and Reset walk through the recorded rounds; the sidebar's settings do not apply."
        )


@dataclass
class ReplayState:
    session: ReplaySession | None = None
    error: str | None = None  # the last file that failed to open, with why
    playing: bool = False


def replay_state() -> ReplayState:
    if REPLAY_KEY not in st.session_state:
        st.session_state[REPLAY_KEY] = ReplayState()
    return st.session_state[REPLAY_KEY]


@cached(max_entries=32)
def _example(path: str, mtime: float) -> Recording:
    return read_recording(path)  # shared read-only between sessions: a Recording is frozen


def example_paths() -> dict[str, Path]:
    """Menu label -> file, for every example recording shipped in assets/recordings/."""
    return {p.stem.replace("_", " "): p for p in sorted(EXAMPLES_DIR.glob("*.json"))}


def example_title(label: str) -> str:
    path = example_paths().get(label)
    if path is None:
        return label
    try:
        rec = _example(str(path), path.stat().st_mtime)
    except ValueError:
        return f"{label} (damaged)"
    return f"{label}: {rec.title}" if rec.title else label


def open_example(state: ReplayState, label: str) -> None:
    path = example_paths().get(label)
    state.error, state.playing = None, False
    if path is None:
        state.error = f"There is no example recording named {label!r}."
        return
    try:
        state.session = ReplaySession.open(_example(str(path), path.stat().st_mtime), f"the example “{label}”")
    except (ValueError, OSError) as exc:
        state.error = f"The example {path.name} could not be opened: {exc}"


def open_upload(state: ReplayState, name: str, data: bytes) -> None:
    """Open an uploaded file; on failure keep whatever was shown before and remember the error."""
    state.playing = False
    try:
        recording = load_recording(data)
    except ValueError as exc:
        state.error = f"{name}: {exc}"
        return
    state.error = None
    state.session = ReplaySession.open(recording, f"the file {name}")


def leave(state: ReplayState) -> None:
    state.session, state.playing, state.error = None, False, None


def session_recording(session: StepSession, env: dict | None = None) -> Recording:
    """A live session as a recording: every run's rounds so far and the baseline's. env: the environment
    (specviz.models.environment of the target); by default read from the target, already in the shared cache."""
    if env is None:
        env = live_environment(session)
    runs = [recorded_run(r.label, r.config, r.records, prefill_ms=r.decoder.prefill_ms, error=r.error) for r in session.runs]
    base = session.baseline
    baseline: RecordedRun = recorded_run(BASELINE_RUN, session.config, base.records, prefill_ms=base.prefill_ms or 0.0, error=base.error)
    return build_recording(
        prompt=session.prompt, prompt_ids=session.prompt_ids, runs=runs, baseline=baseline,
        token_text=session.token_text, environment=env,
    )  # fmt: skip


def live_environment(session: StepSession) -> dict:
    """The target's environment; the session's own target where it keeps one, else the shared cache's."""
    from specviz.models import environment

    target = getattr(session, "target", None) or load_target(session.config)
    return environment(target)


def session_download(session: StepSession | ReplaySession) -> tuple[str, Callable[[], str]]:
    """(file name, a function making the JSON text) for the Save run button; the file is built on click."""
    if isinstance(session, ReplaySession):
        recording = session.recording
        kinds = "-vs-".join(r.config.drafter for r in recording.runs)
        return f"specviz-{kinds}-replay.json", lambda: dumps(recording)
    env = live_environment(session)
    kinds = "-vs-".join(r.config.drafter for r in session.runs)
    stamp = now_utc().replace(":", "").replace("-", "")[:13]
    return f"specviz-{kinds}-{stamp}.json", lambda: dumps(session_recording(session, env))


def _on_example() -> None:
    label = st.session_state.get("example_recording", NO_EXAMPLE)
    state = replay_state()
    if label == NO_EXAMPLE:
        if state.session is not None and state.session.source.startswith("the example"):
            leave(state)
        return
    open_example(state, label)


def _on_upload() -> None:
    uploaded = st.session_state.get("recording")
    state = replay_state()
    if uploaded is None:
        return
    open_upload(state, uploaded.name, uploaded.getvalue())
    st.session_state["example_recording"] = NO_EXAMPLE


def _on_leave() -> None:
    leave(replay_state())
    st.session_state["example_recording"] = NO_EXAMPLE


def controls(state: ReplayState) -> None:
    """In replay mode, the banner and a way back; a recording that failed to open, why. (The pickers sit under the
    run, pickers(); Save run sits with the Step buttons, which rerun on their own: see specviz.ui.step_through.controls.)"""
    if state.error:
        st.error(md_text(state.error))
    if state.session is not None:
        st.info(state.session.banner())
        st.button("Back to live mode", key="live_mode", on_click=_on_leave)


def pickers(state: ReplayState) -> None:
    """The recordings row: example menu and Open a recording (their callbacks open the recording before the next
    run of the page, so they may be drawn below the run)."""
    st.session_state.setdefault("example_recording", NO_EXAMPLE)
    menu, upload = st.columns([3, 3], vertical_alignment="bottom")
    widgets.on(menu).selectbox(
        "Example recordings (open instantly, no model needed)",
        [NO_EXAMPLE, *example_paths()],
        key="example_recording",
        format_func=lambda label: "— pick a recorded run —" if label == NO_EXAMPLE else example_title(label),
        on_change=_on_example,
    )
    backmsgs.expect_upload(MAX_BYTES)  # shared mode: a larger file is refused before Streamlit keeps it
    upload.file_uploader(
        "Open a recording", type=["json"], key="recording", on_change=_on_upload, max_upload_size=MAX_UPLOAD_MB,
        help="A .json file saved with Save run or written by `python -m specviz generate --record FILE`.",
    )  # fmt: skip


def save_button(slot, session: StepSession | ReplaySession | None) -> None:
    """Save run: the current live session (or the open recording) as a recording file."""
    with slot:
        try:
            download = session_download(session) if session is not None and session.num_rounds else None
        except Exception as exc:  # the page stays usable; Save run is disabled and the log says why
            log.warning("Save run unavailable: %s", exc)
            download = None
        if download is not None:
            name, data = download
            st.download_button(
                "Save run", data=data, file_name=name, mime="application/json", key="save_run", on_click="ignore", icon=SAVE_ICON,
                help="Save run: download this run as a recording; it replays anywhere, without a model.",
            )  # fmt: skip
        else:
            st.download_button("Save run", data=b"", key="save_run", disabled=True, icon=SAVE_ICON, help="Save run: step a run (or open a recording) first.")
