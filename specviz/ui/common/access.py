"""The owner's policy inside the app: which role this server plays (mode_line), this session's policy
(current_policy), refusing what participants may not force (refused, limited, refuse_over, refuse_above) and the model
and device boxes within the owner's lists. Model turns are specviz.ui.common.turns; sessions and their sweeper
specviz.ui.common.sessions. The rules themselves live in specviz.workshop.policy (plain Python); this module only reads
streamlit's side of them."""

from __future__ import annotations

import os
from collections.abc import Sequence

import streamlit as st
from streamlit.logger import get_logger

from specviz.ui.common import widgets
from specviz.ui.common.client import current_client
from specviz.ui.common.sessions import track_session
from specviz.ui.common.settings import policy_for, secrets_table
from specviz.viz.markdown import md_text
from specviz.workshop.policy import Policy, bind_text, decide_mode, mode_rule, read_settings
from specviz.workshop.resources import singleton

log = get_logger(__name__)


def current_policy(report: bool = False) -> Policy:
    """The policy for this run (read fresh: cheap, and tests change the environment between runs). Local mode only for
    this machine's owner (current_client: loopback, no proxy header); anyone else is in shared mode.

    A bad owner setting means the strict shared defaults apply; report=True (once per page) says so on the page."""
    track_session()
    try:
        return policy_for(current_client().owner_possible)
    except ValueError as exc:
        if report:
            st.error(f"This server's specviz settings are invalid, so the strictest shared settings apply. {md_text(exc)}")
        return Policy()


def mode_line() -> None:
    """One short sidebar line on every page: which mode this session is in, and why (the client's reason included).
    The first page of the process also logs the bind address and the mode rule."""
    client, address = current_client(), st.get_option("server.address")
    try:
        setting = read_settings(secrets=secrets_table()).get("mode")
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


def replica_footer() -> None:
    """In a room (python -m specviz room), one small line saying which replica serves this page."""
    replica = os.environ.get("SPECVIZ_REPLICA_ID", "").strip()
    if replica:
        st.sidebar.caption(f"Served by replica {replica[:20]}", help="This room runs several app processes; if one restarts, your run continues on another.")
