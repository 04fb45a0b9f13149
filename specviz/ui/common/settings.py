"""The owner's settings as this server reads them, outside any one participant's view: the [specviz] secrets table,
the presenter key, and the policy read without noting a session (a page's timed poll, the sweeper). The rules
themselves live in specviz.workshop.policy (plain Python)."""

from __future__ import annotations

import streamlit as st
from streamlit.logger import get_logger

from specviz.workshop.policy import Policy, load_policy
from specviz.workshop.presenter_key import presenter_key

log = get_logger(__name__)


def secrets_table() -> dict:
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
    return presenter_key(secrets_table=secrets_table())


def quiet_policy() -> Policy:
    """The owner's policy without noting this session as active (a page's timed poll is not a participant's
    click); the strict shared defaults when a setting is invalid (current_policy reports that on the page)."""
    try:
        return load_policy(secrets=secrets_table(), server_address=st.get_option("server.address"))
    except ValueError:
        return Policy()


def policy_for(owner_possible: bool) -> Policy:
    """The owner's policy for a client that may (or may not) be this machine's owner. Raises ValueError naming a bad
    setting."""
    return load_policy(secrets=secrets_table(), server_address=st.get_option("server.address"), owner_possible=owner_possible)
