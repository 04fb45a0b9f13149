"""The page's side of runs that survive a restart (the plain logic is specviz.workshop.saved_runs).

After every round the live session is written to the run directory under its run token, and the token goes into the
URL as ``?run=…`` (specviz.ui.share keeps it there and out of the shared link). A page opened with a token it does not
hold, on any replica (a reload, a restarted or crashed replica, another browser), restores that run at the same round
as a *fork*: its own copy under a new token, so nobody steps someone else's run. The baseline is measured again.

    state = page_state(); restore_run(state)           # at the top of the page, before any Step
    step_and_save(session)                             # wherever a round is stepped (or step_session + save_run)
"""

from __future__ import annotations

import logging

import streamlit as st

from specviz.config import RunConfig
from specviz.core.resume import capture
from specviz.drafters.specs import drafter_spec
from specviz.models import encode_prompt
from specviz.recording import RecordedRun
from specviz.runs import RunModels, SavedDecoder, exit_layer_for, resume_decoder
from specviz.ui import budgets
from specviz.ui.access import current_policy, model_turn
from specviz.ui.models import get_early_exit, get_heads, get_model
from specviz.ui.replay import session_recording
from specviz.ui.session import (
    PageState,
    Run,
    StepSession,
    TokenTexts,
    friendly_error,
    load_target,
    request_baseline,
    session_kv_tokens,
    step_session,
)
from specviz.viz.markdown import md_text
from specviz.workshop.saved_runs import RunStore, SavedRun, SavedRunError, check_token, new_token

log = logging.getLogger(__name__)

RUN_PARAM = "run"  # the URL's query parameter
OWN_KEY = "specviz_own_run_tokens"  # session state: tokens this browser session wrote (its own runs)
TRIED_KEY = "specviz_run_token_tried"  # session state: the last token this session tried to restore
WARNED_KEY = "specviz_run_save_warned"


def run_store() -> RunStore | None:
    """The owner's run directory, or None (with an error on the page) when its settings are invalid."""
    try:
        return RunStore.from_env()
    except ValueError as exc:
        st.error(f"Runs are not saved on this server: {md_text(exc)}")
        return None


def save_run(session: StepSession) -> None:
    """Write the session after its latest round and put its token in the URL. A run directory that cannot be
    written gives one warning per session; the run goes on unsaved."""
    store = run_store()
    if store is None:
        return
    if session.run_token is None:
        session.run_token = new_token()
        st.session_state.setdefault(OWN_KEY, set()).add(session.run_token)
    try:
        saved = SavedRun(session_recording(session), tuple(capture(r.decoder) for r in session.runs))
        store.save(session.run_token, saved)
    except (OSError, ValueError) as exc:
        log.warning("could not save run: %s", exc)
        if not st.session_state.get(WARNED_KEY):
            st.session_state[WARNED_KEY] = True
            st.warning(f"This run cannot be saved ({md_text(exc)}). It goes on, but a reload or a server restart will lose it.", icon="💾")
        return
    if st.query_params.get(RUN_PARAM) != session.run_token:
        st.query_params[RUN_PARAM] = session.run_token


def step_and_save(session: StepSession) -> bool:
    """step_session, then save_run after a round that ran. Returns what step_session returned."""
    stepped = step_session(session)
    if stepped:
        save_run(session)
    return stepped


def restore_run(state: PageState) -> None:
    """If the URL names a run this page does not show, restore it (a fork, under a new token) or say why not."""
    token = st.query_params.get(RUN_PARAM)
    if token is None:
        return
    if st.session_state.get("reset"):  # Reset throws the run away: the URL forgets it too
        del st.query_params[RUN_PARAM]
        return
    session = state.session
    if (session is not None and session.run_token == token) or st.session_state.get(TRIED_KEY) == token:
        return
    st.session_state[TRIED_KEY] = token
    store = run_store()
    if store is None:
        return
    try:
        saved = store.load(check_token(token))
        restored = rebuild_session(saved)
    except SavedRunError as exc:
        _refuse(str(exc))
        return
    except Exception as exc:  # a model that will not load, a queue timeout: the page stays up, a fresh run starts
        _refuse(f"The saved run could not be restored: {friendly_error(exc)}")
        return
    mine = token in st.session_state.get(OWN_KEY, set())
    restored.run_token = token if mine else None  # another session's token: save_run forks it under a new one
    state.session, state.playing = restored, False
    save_run(restored)
    st.info(f"Restored this run at round {restored.num_rounds}: **Step** continues it exactly.", icon="♻️")


def _refuse(message: str) -> None:
    st.warning(md_text(message), icon="🔗")
    if RUN_PARAM in st.query_params:
        del st.query_params[RUN_PARAM]


def _check_allowed(configs: list[RunConfig]) -> None:
    """A saved run's settings must still pass the owner's rules (the policy may have changed since)."""
    policy = current_policy()
    for config in configs:
        if policy.enforce(config)[0] != config:
            raise SavedRunError("This saved run uses settings this server no longer allows, so a fresh run starts.")


def rebuild_session(saved: SavedRun) -> StepSession:
    """A live StepSession at the saved round: the same target and prompt ids, each run resumed, a fresh baseline.
    The prompt passes this server's token budget and the runs reserve their KV cache before the re-prefill."""
    rec = saved.recording
    configs = [r.config for r in rec.runs]
    _check_allowed(configs)
    target = load_target(configs[0])
    prompt_ids = list(rec.prompt_ids)
    if rec.environment.vocab_size != target.vocab_size or encode_prompt(target.tokenizer, rec.prompt, configs[0].chat) != prompt_ids:
        raise SavedRunError("This saved run was made with another model than this server's, so a fresh run starts.")
    budgets.check_ids(target, len(prompt_ids), max(c.max_new_tokens for c in configs), max(c.num_draft_tokens for c in configs))
    models = [_models(c, target) for c in configs]  # loaded (cached) before the turn: a slow load must not hold the queue
    reservation = budgets.reserve("step-through", target, session_kv_tokens(configs, models, len(prompt_ids)))
    try:
        with model_turn(target, "restoring your run"):  # the re-prefill is a model pass like any round
            runs = [Run(r.label, r.config, _resumed(r, state, target, prompt_ids), r.error) for r, state in zip(rec.runs, saved.states)]
    except BaseException:
        reservation.release()
        raise
    baseline = request_baseline(configs[0], target, prompt_ids)  # shared, measured in the background
    compare = configs[1] if len(configs) > 1 else None
    return StepSession(rec.prompt, configs[0], compare, prompt_ids, TokenTexts(target.tokenizer), runs, baseline, target).hold(reservation)


def _models(config: RunConfig, target) -> RunModels:
    """The models a saved run's drafter needs, from the shared caches (loaded before the model turn)."""
    lm = drafter_spec(config.drafter).lm
    draft = get_model(config.draft or "", **config.load_options()) if lm == "draft" else None
    early_exit = get_early_exit(target, exit_layer_for(config, target)) if lm == "early-exit" else None
    heads = get_heads(config.medusa_heads, target) if lm == "heads" else None
    return RunModels(target, draft, early_exit, heads)


def _resumed(run: RecordedRun, state, target, prompt_ids: list[int]):
    models = _models(run.config, target)
    generated = [t for r in run.records for t in r.emitted]
    saved = SavedDecoder(generated, run.records, state, run.seed, run.prefill_ms)
    return resume_decoder(run.config, target, prompt_ids, saved, models.draft, early_exit=models.early_exit, heads=models.heads)
