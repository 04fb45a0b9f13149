"""The owner's policy inside the app: which role this server plays, refusing what participants may not force, the
per-model queue with a visible place in line, and freeing the memory of sessions whose tab went away.

The rules themselves live in specviz.workshop.policy (plain Python); this module only reads streamlit's side of them."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import streamlit as st
from streamlit.logger import get_logger

from specviz.core.protocols import Turn, pausable
from specviz.ui.common import backmsgs, timing, widgets
from specviz.ui.common.client import client_of, current_client
from specviz.ui.common.keys import PRESENTING_KEY, STEP_THROUGH_KEY
from specviz.viz.markdown import md_text
from specviz.workshop.budgets import kv_budget
from specviz.workshop.clients import LOCAL
from specviz.workshop.jobs import JobStopped, LongJobs, check_running, shutting_down, stop_at_exit
from specviz.workshop.policy import Policy, bind_text, decide_mode, load_policy, mode_rule, read_settings
from specviz.workshop.presenter_key import presenter_key
from specviz.workshop.resources import singleton
from specviz.workshop.saved_runs import RunStore
from specviz.workshop.serving import ModelQueue, QueueTimeout, SessionRegistry, TurnKind, model_queue, turns_in_flight

log = get_logger(__name__)  # streamlit's handler: `--logger.level info` shows what the sweeper frees

POLICY_ERROR_KEY = "_specviz_policy_error"
SWEEP_EVERY_S = 5.0


def _secrets_table() -> dict:
    """The [specviz] table of .streamlit/secrets.toml, or {} when there is no secrets file (never an error on the page)."""
    try:
        if not st.secrets.load_if_toml_exists():
            return {}
        table = st.secrets.to_dict().get("specviz", {})
        return dict(table) if isinstance(table, dict) else {}
    except Exception:  # a broken secrets file must not take the app down; the owner sees it in the log
        log.exception("could not read .streamlit/secrets.toml")
        return {}


def presenter_key_setting() -> str | None:
    """The owner's presenter key (SPECVIZ_PRESENTER_KEY or presenter_key in the [specviz] secrets table), or None:
    presenting is off. Held only for the comparison; never drawn, logged or put in session state."""
    return presenter_key(secrets_table=_secrets_table())


def quiet_policy() -> Policy:
    """The owner's policy without noting this session as active (a page's timed poll is not a participant's
    click); the strict shared defaults when a setting is invalid (current_policy reports that on the page)."""
    try:
        return load_policy(secrets=_secrets_table(), server_address=st.get_option("server.address"))
    except ValueError:
        return Policy()


def current_policy(report: bool = False) -> Policy:
    """The policy for this run (read fresh: cheap, and tests change the environment between runs). Local mode only for
    this machine's owner (current_client: loopback, no proxy header); anyone else is in shared mode.

    A bad owner setting means the strict shared defaults apply; report=True (once per page) says so on the page."""
    _track_session()
    try:
        return load_policy(secrets=_secrets_table(), server_address=st.get_option("server.address"), owner_possible=current_client().owner_possible)
    except ValueError as exc:
        if report:
            st.error(f"This server's specviz settings are invalid, so the strictest shared settings apply. {md_text(exc)}")
        return Policy()


def mode_line() -> None:
    """One short sidebar line on every page: which mode this session is in, and why (the client's reason included).
    The first page of the process also logs the bind address and the mode rule."""
    client, address = current_client(), st.get_option("server.address")
    try:
        setting = read_settings(secrets=_secrets_table()).get("mode")
    except ValueError:  # current_policy(report=True) names the bad setting on the page
        setting = None
        text = "Shared mode: this server's specviz settings are invalid, so the strictest shared settings apply."
    else:
        mode, why = decide_mode(setting, address, client.owner_possible)
        if mode == "local":
            text = f"Local mode: {why} ({client.why})."
        elif client.owner_possible:
            text = f"Shared mode: {why} ({client.why})."
        else:
            text = f"Shared mode: {client.why}."
    rule = mode_rule(setting, address)
    singleton("mode-rule-logged", lambda: log.info("specviz mode: the server listens on %s; %s", bind_text(address), rule))
    st.sidebar.caption(md_text(text), help=md_text(f"{rule}. The server listens on {bind_text(address)}."))


def refused(message: str) -> None:
    st.error(f"🔒 {md_text(message)}")


def limited(message: str) -> None:
    st.error(f"⛔ {md_text(message)}")


def capped_options(options: Sequence[int], limit: int) -> list[int]:
    """The menu's choices up to the limit (at least the smallest one, capped)."""
    kept = [o for o in options if o <= limit]
    return kept or [min(min(options), limit)]


def refuse_over(key: str, options: Sequence[int], what: str) -> None:
    """A value forced into a capped menu's session state (URL, session state) falls back to the largest allowed."""
    value = widgets.held(key)
    if value is not None and value not in options:
        limited(f"{what} is limited to {max(options):,} on this server (asked for {value!r}).")
        st.session_state[key] = max(options)


def refuse_above(key: str, high: int, what: str) -> None:
    """A number forced into a capped slider's session state above the cap falls back to the cap."""
    value = widgets.held(key)
    if isinstance(value, (int, float)) and value > high:
        limited(f"{what} is limited to {high:,} on this server (asked for {value!r}).")
        st.session_state[key] = high


def model_choice(key: str, label: str, default: str, *, draft: bool = False) -> str:
    """One model box: free text for the owner; for participants the owner's list ("" = none, for a draft)."""
    policy = current_policy()
    allows = policy.allows_draft if draft else policy.allows_target
    forced = widgets.held(key)
    if isinstance(forced, str) and forced.strip() and not allows(forced):
        refused(f"The model {forced!r} is not on this server's list.")
        st.session_state[key] = "" if draft else policy.default_target
    if policy.allow_custom_models:
        return widgets.text_input(label, value=default, key=key).strip()
    choices = ([""] + list(policy.drafts)) if draft else list(policy.targets)
    if widgets.held(key, choices[0]) not in choices:
        st.session_state[key] = choices[0]
    return widgets.selectbox(f"{label} (this server's list)", choices, key=key, format_func=lambda d: d or "none")


def device_choice(key: str) -> str:
    """The device menu for the owner; auto for participants."""
    if not current_policy().allow_device:
        if widgets.held(key, "auto") != "auto":
            refused("Choosing the device is not allowed on this shared server; using auto.")
            st.session_state[key] = "auto"
        return "auto"
    return widgets.selectbox("device", ["auto", "cpu", "cuda", "mps"], key=key)


def target_and_device(target_key: str, device_key: str, default_target: str) -> tuple[str, str]:
    """The Exactness lab's model box: free text and a device menu for the owner, the allow-list for participants."""
    policy = current_policy()
    with st.expander("Target model", expanded=False):
        target = model_choice(target_key, "hub id, local folder or .gguf", default_target)
        device = device_choice(device_key)
    target = (target or "").strip() or policy.default_target
    return (target if policy.allows_target(target) else policy.default_target), device


# --- one queue per loaded model --------------------------------------------------------------------------------


def queue_key(model) -> tuple:
    return (model.name, str(model.device), str(model.dtype))


def target_queue(model) -> ModelQueue:
    """The one queue for this loaded model, bounded by the owner's concurrency for its device."""
    return model_queue(queue_key(model), current_policy().concurrency(model.device.type))


@contextmanager
def model_turn(model, what: str = "your round", slot=None, kind: TurnKind = "step") -> Iterator[float]:
    """Hold a turn on `model` for the with-block; while waiting, show the place in line (an element drawn only if we
    wait; in `slot`, an st.empty, when given). kind: a participant's "step", or a piece of a long "job". Raises
    ValueError with a message after the owner's queue timeout, and JobStopped (a ValueError) once the server is
    shutting down. A long prefill inside the block lets waiting turns go first between its chunks
    (specviz.core.protocols.pausable; the waits count as queue time, not the run's)."""
    check_running()
    policy = current_policy()
    queue = model_queue(queue_key(model), policy.concurrency(model.device.type))
    box = slot
    start = time.perf_counter()

    def on_wait(ahead: int, waited_s: float) -> None:
        nonlocal box
        if box is None:
            box = st.empty()
        box.info(
            f"⏳ Waiting for the model: {ahead} ahead of you ({waited_s:.0f} s so far). {what.capitalize()} runs when it is your "
            "turn; its timing starts then, so the wait does not count against the speedup."
        )

    try:
        with queue.held_turn(on_wait, timeout_s=policy.queue_timeout_s, kind=kind, client=current_client().address) as held:
            waited = held.waited_s
            timing.add_queue_wait(waited)
            log.debug("specviz turn: %s waited %.3f s for %s", what, waited, queue.name)  # scripts/contention.py reads this
            if box is not None:
                box.empty()

            def pass_on() -> float:
                again = held.pass_on()
                if again:
                    timing.add_queue_wait(again)
                    log.debug("specviz turn: %s waited %.3f s for %s", what, again, queue.name)
                    if box is not None:
                        box.empty()
                return again

            with pausable(pass_on):
                yield waited
    except QueueTimeout as exc:
        timing.add_queue_wait(time.perf_counter() - start)
        log.warning("specviz queue for %s: %s", queue.name, exc)
        raise ValueError(str(exc)) from None
    finally:
        if box is not None:
            box.empty()


# --- long jobs: one turn per run, one job per participant --------------------------------------------------------

_jobs = LongJobs()


def session_id_now() -> str | None:
    """This browser session's id (None outside a script run)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


@contextmanager
def long_job(model, job: str, each: str) -> Iterator[Turn]:
    """A long job of this session (job: "a benchmark sweep"): refused in shared mode while the session runs another.
    Yields a Turn: each call takes one model turn (each: "the sweep's next run" while waiting), shows the place in
    line in one slot, and raises JobStopped between runs once the tab is gone or the server stops."""
    sid = session_id_now()
    hold = _jobs.hold(sid, job) if current_policy().shared and sid else contextlib.nullcontext()
    slot = st.empty()
    with hold:

        def turn():
            rt = _runtime()
            if sid and rt is not None and not rt.is_active_session(sid):
                raise JobStopped(f"This tab disconnected, so {job} stopped to leave the model to the others.")
            return model_turn(model, each, slot, kind="job")

        yield turn


# --- memory: free what a closed or idle session holds ----------------------------------------------------------

_registry = SessionRegistry()
_sweeper_started = False
_sweeper_lock = threading.Lock()


def _runtime():
    from streamlit import runtime

    return runtime.get_instance() if runtime.exists() else None


def _track_session() -> None:
    """Note this session (its id, its state, the time) so the sweeper can free it once its tab is gone or idle."""
    rt = _runtime()
    if rt is None:
        return  # AppTest and bare `python` runs: no server, nothing to sweep
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None:
        return
    address = _admit(ctx.session_id)
    _registry.touch(ctx.session_id, ctx.session_state, address)
    _start_sweeper()


def _admit(session_id: str) -> str:
    """This session's client address; a new session over the owner's cap of sessions per address stops here with a
    message (the owner at this machine is never capped). A room behind one NAT shares an address: the cap is a
    guard against floods, the KV-cache budget the guard of memory (docs/workshop-safety.md)."""
    client = current_client()
    address = client.address
    try:
        cap = load_policy(secrets=_secrets_table(), server_address=st.get_option("server.address"), owner_possible=client.owner_possible).max_sessions_per_client
    except ValueError:
        cap = Policy().max_sessions_per_client
    if address != LOCAL and not _registry.admits(session_id, address, cap):
        log.info("specviz refused a session of %s: %d sessions open", address, _registry.sessions_of(address))
        st.error(
            f"Your address already has {cap:,} sessions open on this server, its limit. Close tabs of this app you no "
            "longer use, then reload this one."
        )
        st.stop()
    return address


def _free_session(session_id: str, state, whole: bool) -> None:
    """whole: the tab is gone, drop everything the session kept (state, uploads). Else idle: drop the runs only,
    except a presenter's: the room follows that run however long the presenter talks between Steps (a presentation
    whose presenter's page is gone ends by itself: specviz.workshop.presentation)."""
    try:
        if not whole and PRESENTING_KEY in state and state[PRESENTING_KEY] is not None:
            return
        page = state[STEP_THROUGH_KEY] if STEP_THROUGH_KEY in state else None
        if page is not None and hasattr(page, "free"):
            page.free()
        if whole:
            kv_budget().release_session(session_id)  # whatever else it still reserved
            for key in list(state.filtered_state):
                try:
                    del state[key]
                except Exception:  # a widget key may refuse; its value is small
                    pass
            rt = _runtime()
            if rt is not None:
                rt.uploaded_file_mgr.remove_session_files(session_id)
    except Exception:
        log.exception("freeing session %s failed", session_id)


def live_run_tokens(states) -> list[str]:
    """The run tokens the step-through pages of these sessions hold now (a freed session holds none)."""
    tokens = []
    for state in states:
        try:
            page = state[STEP_THROUGH_KEY] if STEP_THROUGH_KEY in state else None
            token = getattr(getattr(page, "session", None), "run_token", None)
        except Exception:  # a session being torn down meanwhile
            continue
        if isinstance(token, str):
            tokens.append(token)
    return tokens


def hold_live_runs(states) -> int:
    """Touch the saved runs these live sessions hold, so no replica's eviction takes them (see
    specviz.workshop.saved_runs.LIVE_WINDOW_S); returns how many files were touched."""
    tokens = live_run_tokens(states)
    if not tokens:
        return 0
    try:
        return RunStore.from_env().touch(tokens)
    except ValueError:  # bad run-directory settings: the pages say so
        return 0


def _trim() -> None:
    gc.collect()
    try:  # give freed heap pages back to the OS (glibc); elsewhere a no-op
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _sweep_forever() -> None:
    while not shutting_down.wait(SWEEP_EVERY_S):  # stops with the server (and is a daemon thread besides)
        try:
            rt = _runtime()
            if rt is None:
                continue
            grace = float(st.get_option("server.disconnectedSessionTTL") or 30)
            try:
                # no session here: the sweeper reads the policy for idle_minutes only (the same in both modes)
                idle_s = load_policy(secrets=_secrets_table(), server_address=st.get_option("server.address"), owner_possible=False).idle_minutes * 60
            except ValueError:
                idle_s = Policy().idle_minutes * 60
            freed = _registry.sweep(rt.is_active_session, _free_session, gone_after_s=grace, idle_after_s=idle_s)
            if freed:
                log.info("specviz freed %d session(s): %d tracked", freed, len(_registry))
                _trim()
            hold_live_runs(_registry.states())
        except Exception:  # the sweeper must never die; a bad policy is reported on the page instead
            log.exception("session sweep failed")


def session_is_local(session_id: str) -> bool:
    """Whether the session ``session_id`` is in local mode (any thread; a bad setting: shared)."""
    try:
        policy = load_policy(secrets=_secrets_table(), server_address=st.get_option("server.address"), owner_possible=client_of(session_id).owner_possible)
    except ValueError:
        return False
    return not policy.shared


def _start_sweeper() -> None:
    global _sweeper_started
    backmsgs.install(session_is_local)  # once per process: shared mode drops Streamlit's developer messages
    with _sweeper_lock:
        if not _sweeper_started:
            threading.Thread(target=_sweep_forever, name="specviz-session-sweeper", daemon=True).start()
            stop_at_exit(turns_in_flight)  # SIGTERM: no new model turn, and the ones in flight end before the process does
            _sweeper_started = True


def replica_footer() -> None:
    """In a room (python -m specviz room), one small line saying which replica serves this page."""
    replica = os.environ.get("SPECVIZ_REPLICA_ID", "").strip()
    if replica:
        st.sidebar.caption(f"Served by replica {replica[:20]}", help="This room runs several app processes; if one restarts, your run continues on another.")
