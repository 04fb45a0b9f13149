"""Browser sessions on this server: noting each (its state, its client address, the time), admitting a new one within
the owner's cap per address, and freeing the memory of sessions whose tab went away or sat idle. The sweeping thread
and its registry are specviz.workshop.sweeper (plain Python); this module hands it Streamlit's side: which sessions are
connected, how to free one, the owner's grace and idle times."""

from __future__ import annotations

import asyncio

import streamlit as st
from streamlit.logger import get_logger

from specviz.ui.common import backmsgs, st_internals
from specviz.ui.common.client import client_of, current_client
from specviz.ui.common.keys import PRESENTING_KEY, STEP_THROUGH_KEY
from specviz.ui.common.settings import policy_for
from specviz.workshop.budgets import kv_budget
from specviz.workshop.clients import LOCAL
from specviz.workshop.jobs import stop_at_exit
from specviz.workshop.policy import Policy
from specviz.workshop.queues import turns_in_flight
from specviz.workshop.resources import singleton
from specviz.workshop.saved_runs import RunStore
from specviz.workshop.sweeper import SessionSweeper

log = get_logger(__name__)  # streamlit's handler: `--logger.level info` shows what the sweeper frees


def sweeper() -> SessionSweeper:
    """This process's session sweeper (its registry and its thread): one per process."""
    return singleton("session-sweeper", lambda: SessionSweeper(log=log))


def session_id_now() -> str | None:
    """This browser session's id (None outside a script run)."""
    return st_internals.session_id_now()


def runtime():
    """Streamlit's runtime (None outside a server: AppTest, bare python)."""
    return st_internals.runtime_instance()


def track_session() -> None:
    """Note this session (its id, its state, the time) so the sweeper can free it once its tab is gone or idle."""
    rt = runtime()
    if rt is None:
        return  # AppTest and bare `python` runs: no server, nothing to sweep
    ctx = st_internals.script_run_ctx()
    if ctx is None:
        return
    address = _admit(ctx.session_id)
    sweeper().registry.touch(ctx.session_id, ctx.session_state, address)
    _start_sweeper()


def _admit(session_id: str) -> str:
    """This session's client address; a new session over the owner's cap of sessions per address stops here with a
    message (the owner at this machine is never capped). A room behind one NAT shares an address: the cap is a
    guard against floods, the KV-cache budget the guard of memory (docs/workshop-safety.md)."""
    client = current_client()
    address = client.address
    try:
        cap = policy_for(client.owner_possible).max_sessions_per_client
    except ValueError:
        cap = Policy().max_sessions_per_client
    if address != LOCAL and not sweeper().registry.admits(session_id, address, cap):
        log.info("specviz refused a session of %s: %d sessions open", address, sweeper().registry.sessions_of(address))
        st.error(
            f"Your address already has {cap:,} sessions open on this server, its limit. Close tabs of this app you no "
            "longer use, then reload this one."
        )
        hang_up(session_id)
        st.stop()
    return address


REFUSED_CLOSE_AFTER_S = 2.0  # long enough for the refusal's message to reach the browser first


def hang_up(session_id: str, after_s: float = REFUSED_CLOSE_AFTER_S) -> bool:
    """Close a refused session's websocket (code 1008, policy) and the session itself after_s from now, on the
    server's event loop: a client over its cap holds no connection or session state (a raw client would otherwise
    keep both until it leaves). Streamlit internals (the runtime's loop, the Starlette client's socket): where they
    differ, nothing is closed, a warning says so, and False."""
    rt = runtime()
    try:
        loop = rt._get_async_objs().eventloop
        client = rt.get_client(session_id)
        socket = client._websocket if client is not None else None
    except Exception:
        socket = None
    if socket is None:
        log.warning("could not close the websocket of refused session %s (this Streamlit's internals differ)", session_id[:8])
        return False

    async def close() -> None:
        await asyncio.sleep(after_s)
        try:
            await socket.close(code=1008)
        except Exception:  # the client left first
            pass
        rt.close_session(session_id)

    asyncio.run_coroutine_threadsafe(close(), loop)
    return True


def free_session(session_id: str, state, whole: bool) -> None:
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
            rt = runtime()
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
    except OSError as exc:  # the room's store is away: the next sweep tries again (LIVE_WINDOW_S spans many sweeps)
        log.warning("could not hold the live sessions' runs: %s", exc)
        return 0


def session_is_local(session_id: str) -> bool:
    """Whether the session ``session_id`` is in local mode (any thread; a bad setting: shared)."""
    try:
        policy = policy_for(client_of(session_id).owner_possible)
    except ValueError:
        return False
    return not policy.shared


def _sweep() -> None:
    """One sweep (the sweeper's thread calls it every SWEEP_EVERY_S): free the sessions due, then keep the saved runs
    of the live ones from eviction."""
    rt = runtime()
    if rt is None:
        return
    grace = float(st.get_option("server.disconnectedSessionTTL") or 30)
    try:
        # no session here: the sweeper reads the policy for idle_minutes only (the same in both modes)
        idle_s = policy_for(owner_possible=False).idle_minutes * 60
    except ValueError:
        idle_s = Policy().idle_minutes * 60
    sweeper().sweep(rt.is_active_session, free_session, gone_after_s=grace, idle_after_s=idle_s)
    hold_live_runs(sweeper().registry.states())


def guard_server() -> bool:
    """Once per process: shared sessions send only what a page needs, and upload only what the server asked for
    (specviz.ui.common.backmsgs). Called before the server starts where specviz starts it (WARM_START: a room's
    replicas, the container); at the first script run otherwise. False where Streamlit's internals differ."""
    return backmsgs.install(session_is_local)


def _start_sweeper() -> None:
    guard_server()  # a no-op where the launcher already did it before the server started
    if sweeper().start(_sweep):
        stop_at_exit(turns_in_flight)  # SIGTERM: no new model turn, and the ones in flight end before the process does
