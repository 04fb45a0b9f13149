"""The owner's caps on the step-through sidebar: the drafters a participant may pick, values forced into session state
past the caps (a URL, a script, a raw client) refused with a message before the widgets draw, and the assembled
RunConfig held within the policy (specviz.workshop.policy.Policy.enforce)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from specviz.config import (
    DEVICES,
    DRAFT_VOCAB_CHOICES,
    DRAFTER_KINDS,
    DTYPES,
    FIELDS,
    RunConfig,
    Setting,
)
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import drafter_spec
from specviz.ui.common import widgets
from specviz.ui.common.access import limited, refused
from specviz.workshop.policy import Policy

DEFAULTS = RunConfig()  # the sidebar starts from the engine's defaults (drafter, k, n-gram settings, ...)
NO_DRAFT = ""
SHIPPED_HEADS = ""  # the Medusa heads field left empty: the heads shipped for the embedded target (RunConfig.medusa_heads None)
# numeric widgets no owner's limit caps: key -> (type, low, high), from the table (and run B's tree width); a forced
# value outside is refused before the widget would choke on it
NUMBERS: dict[str, tuple[type, float, float]] = {
    s.widget_key: (s.type, *s.widget_range) for s in FIELDS if s.widget in ("slider", "number") and not s.cap
} | {"compare_tree_width": (int, 1, MAX_TREE_WIDTH)}


def widget_high(s: Setting, policy: Policy) -> Any:
    """The top of a field's widget: its range, or the owner's limit where one caps it."""
    high = s.widget_range[1]
    return min(high, getattr(policy, s.cap)) if s.cap else high


def first_value(s: Setting, policy: Policy) -> Any:
    """The value a field's widget starts at: the engine's default, within the owner's limit."""
    default = s.to_widget(s.default)
    return min(default, widget_high(s, policy)) if s.cap else default


def allowed_drafters(policy: Policy) -> list[str]:
    """The drafter menu: the draft-model drafter only where some draft model may be chosen."""
    if policy.allow_custom_models or policy.drafts:
        return list(DRAFTER_KINDS)
    return [d for d in DRAFTER_KINDS if not drafter_spec(d).needs_model]


def refuse_forced(policy: Policy) -> None:
    """Check what session state holds for the sidebar's keys before the widgets draw (a URL parameter or a script may
    have put anything there): refuse what the owner did not allow, cap what is over a limit, drop what is not valid."""
    state = st.session_state
    opt_ins = (("trust_remote_code", "trust remote code", policy.allow_remote_code),
               ("allow_pickle", "allow pickle checkpoints", policy.allow_pickle),
               ("allow_download", "allow downloads", policy.allow_download))  # fmt: skip
    for key, label, allowed in opt_ins:
        if widgets.held(key) and not allowed:
            refused(f"'{label}' is not allowed on this shared server; it stays off.")
            state[key] = False
    target = widgets.held("target")
    if not isinstance(target, str) or (target.strip() and not policy.allows_target(target)):
        refused(f"The target {target!r} is not on this server's list; using {policy.default_target!r}.")
        state["target"] = policy.default_target
    draft = widgets.held("draft_model")
    if not isinstance(draft, str) or (draft.strip() and not policy.allows_draft(draft)):
        refused(f"The draft model {draft!r} is not on this server's list.")
        state["draft_model"] = NO_DRAFT
    for key, what in (("medusa_heads", "Medusa heads"), ("eagle_head", "EAGLE head")):
        heads = widgets.held(key, SHIPPED_HEADS)
        if not isinstance(heads, str) or (heads.strip() and not policy.allows_heads(heads)):
            refused(f"The {what} {heads!r} are not on this server's list; using the shipped ones.")
            state[key] = SHIPPED_HEADS
    if widgets.held("draft_vocab", 0) not in DRAFT_VOCAB_CHOICES:
        refused(f"The draft vocabulary {widgets.held('draft_vocab')!r} is not one of {', '.join(map(str, DRAFT_VOCAB_CHOICES))}; using the full vocabulary.")
        state["draft_vocab"] = 0
    for key, choices in (("device", DEVICES), ("dtype", DTYPES)):
        value = widgets.held(key, "auto")
        if value not in choices or (value != "auto" and not policy.allow_device):
            refused(f"{key} {value!r} is not allowed on this server; using auto.")
            state[key] = "auto"
    drafter = widgets.held("drafter")
    if drafter not in allowed_drafters(policy):
        refused(f"The drafter {drafter!r} is not available on this server; using {DEFAULTS.drafter!r}.")
        state["drafter"] = DEFAULTS.drafter
    for s in FIELDS:  # the widgets an owner's limit caps: k and max new tokens
        if not (s.cap and s.widget):
            continue
        key, high, what, value = s.widget_key, widget_high(s, policy), s.short, widgets.held(s.widget_key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < s.widget_range[0]:
            refused(f"{what} {value!r} is not a whole number of at least {s.widget_range[0]}; using {first_value(s, policy)}.")
            state[key] = first_value(s, policy)
        elif value > high:
            limited(f"{what} is limited to {high} on this server (asked for {value}).")
            state[key] = high
    for key, (kind, low, high) in NUMBERS.items():
        value = widgets.held(key)
        if value is None:
            continue
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high and (kind is float or float(value).is_integer())
        if not ok:
            refused(f"{key} {value!r} is outside {low:g} to {high:g}; using the default.")
            del state[key]
        elif kind is int and not isinstance(value, int):
            state[key] = int(value)


def enforce(policy: Policy, config: RunConfig) -> RunConfig:
    """The finished config checked once more against the policy (whatever the widgets said), with the messages."""
    config, refusals, limits = policy.enforce(config)
    for message in refusals:
        refused(message)
    for message in limits:
        limited(message)
    return config
