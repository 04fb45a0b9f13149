"""The page's side of runs that survive a restart (the plain logic is specviz.workshop.saved_runs).

After every round the live session is written to the run directory under its run token, and the token goes into the
URL as ``?run=…`` (specviz.ui.room.share keeps it there and out of the shared link). A page opened with a token it does not
hold, on any replica (a reload, a restarted or crashed replica, another browser), restores that run at the same round
as a *fork*: its own copy under a new token, so nobody steps someone else's run. The baseline is measured again.

What one session may write is bounded: it keeps at most the owner's ``max_saved_runs`` files (a new one replaces its
own oldest, never another session's), a token it already forked opens that fork again instead of forking anew (so
alternating ``?run=A`` / ``?run=B`` writes two files, not one per rerun), and a Step of a finished run writes nothing.
A restore that failed for a passing reason (the model's queue timed out, the disk could not be read) keeps the token
in the URL and offers *Try again*; a token that can never work here is dropped, and the message names it.

    state = page_state(); restore_run(state)           # at the top of the page, before any Step
    step_and_save(session)                             # wherever a round is stepped (or step_session + save_run)
"""

from __future__ import annotations

import logging
from dataclasses import replace

import streamlit as st

from specviz.config import RunConfig
from specviz.models import encode_prompt
from specviz.recording.schema import RecordedRun
from specviz.runs import RunModels, SavedDecoder, resume_decoder
from specviz.ui.common import budgets
from specviz.ui.common.access import current_policy
from specviz.ui.common.errors import friendly_error
from specviz.ui.common.models import TokenTexts, load_target, run_models
from specviz.ui.common.turns import model_turn
from specviz.ui.step_through.replay import session_recording
from specviz.ui.step_through.session import (
    PageState,
    Run,
    StepSession,
    evict_when_idle,
    request_baseline,
    session_kv_tokens,
    step_session,
)
from specviz.viz.markdown import md_code, md_text
from specviz.workshop.saved_runs import RunStore, SavedRun, SavedRunError, check_token, new_token, write_problem
from specviz.workshop.store import StoreUnavailable

log = logging.getLogger(__name__)

RUN_PARAM = "run"  # the URL's query parameter
OWN_KEY = "specviz_own_run_tokens"  # session state: the tokens this browser session wrote (its own runs), oldest first
FORKS_KEY = "specviz_run_forks"  # session state: {a token this session forked: its fork's token}
TRIED_KEY = "specviz_run_token_tried"  # session state: the last token this session tried to restore
FAILED_KEY = "specviz_run_restore_failed"  # session state: (token, message) of a restore that may work if tried again
WARNED_KEY = "specviz_run_save_warned"  # session state: the latest save failed and the page said so
SHOWN_TOKEN_CHARS = 40  # a refused token is named in the message, cut to this (a malformed one can be any size)


def run_store() -> RunStore | None:
    """The owner's run directory, or None (with an error on the page) when its settings are invalid."""
    try:
        return RunStore.from_env()
    except ValueError as exc:
        st.error(f"Runs are not saved on this server: {md_text(exc)}")
        return None


def own_tokens() -> list[str]:
    """The tokens this session wrote, oldest first (its quota counts them)."""
    own = st.session_state.get(OWN_KEY)
    if not isinstance(own, list):
        own = list(own or [])
        st.session_state[OWN_KEY] = own
    return own


def _claim(store: RunStore, token: str) -> None:
    """A new token of this session's: over its quota, its own oldest files go (never another session's)."""
    own = own_tokens()
    own.append(token)
    quota = current_policy().max_saved_runs
    forks = st.session_state.get(FORKS_KEY, {})
    while len(own) > quota:
        old = own.pop(0)
        try:
            store.remove(old)  # the presented run stays (the presentation holds it)
        except OSError as exc:  # the store is away: the old run stays until eviction or its expiry takes it
            log.warning("could not remove a session's oldest run: %s", exc)
        for source in [s for s, fork in forks.items() if fork == old]:
            del forks[source]


def save_run(session: StepSession) -> None:
    """Write the session after its latest round and put its token in the URL. A run directory that cannot be
    written (a full disk, a directory full of runs in use) says so once until a save works again; the run goes on
    unsaved."""
    store = run_store()
    if store is None:
        return
    if session.run_token is None:
        session.run_token = new_token()
        _claim(store, session.run_token)
    try:
        saved = SavedRun(session_recording(session), tuple(r.decoder.state() for r in session.runs))
        store.save(session.run_token, saved)
    except (OSError, ValueError) as exc:
        log.warning("could not save run: %s", exc)
        if not st.session_state.get(WARNED_KEY):
            st.session_state[WARNED_KEY] = True
            why = write_problem(exc) if isinstance(exc, OSError) else str(exc)
            if isinstance(exc, StoreUnavailable):  # it comes back: the next Step saves the run as it is then
                st.warning(f"This run is not saved ({md_text(why)}). It goes on, and every Step tries to save it again; a reload before one works would lose it.", icon="💾")
            else:
                st.warning(f"This run cannot be saved ({md_text(why)}). It goes on, but a reload or a server restart will lose it.", icon="💾")
        return
    if st.session_state.get(WARNED_KEY):
        st.toast("This run is saved again.", icon="💾")
    st.session_state[WARNED_KEY] = False
    if st.query_params.get(RUN_PARAM) != session.run_token:
        st.query_params[RUN_PARAM] = session.run_token


def step_and_save(session: StepSession) -> bool:
    """step_session, then save_run after a round that ran (a Step of runs that all finished writes nothing).
    Returns what step_session returned."""
    ran = not session.done
    stepped = step_session(session)
    if stepped and ran:
        save_run(session)
    return stepped


def restore_run(state: PageState) -> None:
    """If the URL names a run this page does not show, restore it (a fork, under a new token; a token this session
    forked before opens that fork) or say why not."""
    token = st.query_params.get(RUN_PARAM)
    if token is None:
        return
    if st.session_state.get("reset"):  # Reset throws the run away: the URL forgets it too
        del st.query_params[RUN_PARAM]
        st.session_state.pop(FAILED_KEY, None)
        return
    session = state.session
    if session is None and state.freed_token is not None and state.freed_token == token:  # freed by the sweep or the budget: back from its file
        st.session_state.pop(TRIED_KEY, None)
    state.freed_token = None
    if (session is not None and session.run_token == token) or st.session_state.get(TRIED_KEY) == token:
        _offer_retry(token)
        return
    st.session_state[TRIED_KEY] = token
    st.session_state.pop(FAILED_KEY, None)
    store = run_store()
    if store is None:
        return
    own, forks = own_tokens(), st.session_state.setdefault(FORKS_KEY, {})
    source = forks.get(token)
    if source is None or source not in own or not _exists(store, source):
        source = token
    mine = source in own
    try:
        saved = store.load(check_token(source))
        restored = rebuild_session(saved)
    except SavedRunError as exc:
        (_failed if exc.transient else _refuse)(token, str(exc))
        return
    except Exception as exc:  # a model that will not load, a queue timeout: the page stays up, the link keeps its token
        _failed(token, f"The saved run could not be restored: {friendly_error(exc)}")
        return
    state.session, state.playing = restored, False
    evict_when_idle(state, restored)
    if mine:  # its own file, unchanged: no write, only the URL (a token it forked before maps to that fork)
        restored.run_token = source
        own.remove(source)
        own.append(source)  # used now: the last of its own runs its quota would replace
        try:
            store.touch([source])
        except OSError as exc:  # the store went away meanwhile: the sweeper touches it again later
            log.warning("could not mark a restored run as live: %s", exc)
        if token != source:
            st.query_params[RUN_PARAM] = source
    else:  # another session's token: save_run forks it under a new one
        save_run(restored)
        if restored.run_token is not None:
            forks[token] = restored.run_token
    st.info(f"Restored this run at round {restored.num_rounds}: **Step** continues it exactly.", icon="♻️")


def _exists(store: RunStore, token: str) -> bool:
    """Whether the store holds this run; an unreachable store holds nothing (the load that follows says why)."""
    try:
        return store.exists(token)
    except OSError:
        return False


def _shown(token: str) -> str:
    return md_code(token if len(token) <= SHOWN_TOKEN_CHARS else token[: SHOWN_TOKEN_CHARS - 1] + "…")


def _refuse(token: str, message: str) -> None:
    """A token that can never work here: the URL forgets it, and the message says which one it was."""
    st.warning(f"{md_text(message)} (The link's run token was {_shown(token)}.)", icon="🔗")
    if RUN_PARAM in st.query_params:
        del st.query_params[RUN_PARAM]


def _failed(token: str, message: str) -> None:
    """A restore that may work if tried again: the URL keeps the token and the page offers Try again."""
    log.warning("restoring a saved run failed: %s", message)
    st.session_state[FAILED_KEY] = (token, message)
    _offer_retry(token)


def _offer_retry(token: str) -> None:
    failed = st.session_state.get(FAILED_KEY)
    if failed is None or failed[0] != token:
        return
    st.warning(
        f"{md_text(failed[1])} The link keeps its run token ({_shown(token)}): press **Try again** in a moment, "
        "or Step to start a fresh run instead.",
        icon="🔗",
    )
    st.button("Try again", key="restore_retry", on_click=_retry, help="Restore the run this link names again.")


def _retry() -> None:
    st.session_state.pop(TRIED_KEY, None)
    st.session_state.pop(FAILED_KEY, None)


def _allowed(configs: list[RunConfig]) -> list[RunConfig]:
    """A saved run's settings must still pass the owner's rules (the policy may have changed since); adaptive k's
    ceiling alone is lowered to the owner's k cap rather than refused (runs saved before it was recorded)."""
    policy = current_policy()
    allowed = []
    for config in configs:
        enforced = policy.enforce(config)[0]
        if enforced != replace(config, max_draft_tokens=enforced.max_draft_tokens):
            raise SavedRunError("This saved run uses settings this server no longer allows, so a fresh run starts.")
        allowed.append(enforced)
    return allowed


def rebuild_session(saved: SavedRun) -> StepSession:
    """A live StepSession at the saved round: the same target and prompt ids, each run resumed, a fresh baseline.
    The prompt passes this server's token budget and the runs reserve their KV cache before the re-prefill."""
    rec = saved.recording
    configs = _allowed([r.config for r in rec.runs])
    target = load_target(configs[0])
    prompt_ids = list(rec.prompt_ids)
    if rec.environment.vocab_size != target.vocab_size or encode_prompt(target.tokenizer, rec.prompt, configs[0].chat) != prompt_ids:
        raise SavedRunError("This saved run was made with another model than this server's, so a fresh run starts.")
    budgets.check_ids(target, len(prompt_ids), max(c.max_new_tokens for c in configs), max(c.k_ceiling for c in configs))
    models = [run_models(c, target=target) for c in configs]  # loaded (cached) before the turn: a slow load must not hold the queue
    reservation = budgets.reserve("step-through", target, session_kv_tokens(configs, models, len(prompt_ids)))
    try:
        with model_turn(target, "restoring your run"):  # the re-prefill is a model pass like any round
            resumed = [_resumed(r, state, m, prompt_ids, c) for r, c, m, state in zip(rec.runs, configs, models, saved.states)]
            runs = [Run(r.label, c, d, r.error) for r, c, d in zip(rec.runs, configs, resumed)]
    except BaseException:
        reservation.release()
        raise
    baseline = request_baseline(configs[0], target, prompt_ids)  # shared, measured in the background
    compare = configs[1] if len(configs) > 1 else None
    return StepSession(rec.prompt, configs[0], compare, prompt_ids, TokenTexts(target.tokenizer), runs, baseline, target).hold(reservation)


def _resumed(run: RecordedRun, state, models: RunModels, prompt_ids: list[int], config: RunConfig | None = None):
    """The recorded run continued with the models its drafter needs (specviz.ui.common.models.run_models), under
    config (the recorded one checked against the policy; default: as recorded)."""
    config = config or run.config
    generated = [t for r in run.records for t in r.emitted]
    saved = SavedDecoder(generated, run.records, state, run.seed, run.prefill_ms)
    try:
        return resume_decoder(config, models, prompt_ids, saved)
    except ValueError as exc:  # the pieces do not fit (specviz.core.resume): trying again cannot help
        raise SavedRunError(f"The saved run does not fit this server ({exc}), so a fresh run starts.") from None
