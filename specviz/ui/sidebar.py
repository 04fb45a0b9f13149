"""Sidebar widgets -> one RunConfig plus the prompt and the UI-only options.

Widget keys are a contract for automation and tests: prompt, num_draft_tokens, temperature, drafter, seed
(and the buttons step, run_all, reset on the page).

The owner's policy (specviz.policy) is enforced here, where the widgets become a RunConfig: options participants may
not choose are not drawn, and a value forced into session state (a URL parameter, a script) is refused with an
error and replaced by the safe default, both before the widgets draw and again on the finished RunConfig."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import streamlit as st

from specviz.config import DRAFTER_KINDS, EMBEDDED_TARGET, MAX_NEW_TOKENS, RunConfig
from specviz.core.decoding import MAX_DRAFT_TOKENS
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.policy import Policy
from specviz.ui.access import current_policy, limited, refused
from specviz.ui.prompts import load_examples
from specviz.ui.share import restore_from_query

DRAFTER_LABELS = {
    "lookup": "prompt lookup (copies n-grams from the context)",
    "ngram": "context n-gram model (a real q from counts)",
    "model": "draft model (a smaller LM)",
    "early-exit": "early exit (the target's first L layers)",
    "none": "none: plain target decoding",
}
CUSTOM = "custom (type the ids below)"
# label -> (target, draft). The hub presets need a cached download or 'allow downloads'.
MODEL_PAIRS: dict[str, tuple[str, str]] = {
    "embedded SmolLM2-135M-Instruct (offline)": (EMBEDDED_TARGET, ""),
    "SmolLM2-360M-Instruct ← 135M draft (hub)": ("HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "SmolLM2-1.7B-Instruct ← 135M draft (hub)": ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "Qwen2.5-1.5B-Instruct ← 0.5B draft (hub)": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
}
DEFAULTS = RunConfig()  # the sidebar starts from the engine's defaults (drafter, k, n-gram settings, ...)
COMPARE_OFF = "off"
TREE_DRAFTERS = ("ngram", "model", "early-exit")  # drafters that propose token trees; the others draft chains only
PLAY_PACES = (0.25, 0.5, 1.0, 2.0)  # seconds between auto-steps
DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "fp16-weights", "bfloat16", "float16")  # int8-dynamic is the numerics lab's alone
NO_DRAFT = ""
# numeric widgets: key -> (type, low, high); a forced value outside is refused before the widget would choke on it
NUMBERS: dict[str, tuple[type, float, float]] = {
    "temperature": (float, 0.0, 2.0), "top_k": (int, 0, 100_000), "top_p": (float, 0.05, 1.0), "seed": (int, 0, 2**31 - 1),
    "ngram_max": (int, DEFAULTS.ngram_min, 8), "ngram_threshold": (float, 0.0, 1.0), "exit_layer": (int, 0, 200),
    "compare_tree_width": (int, 1, MAX_TREE_WIDTH),
}  # fmt: skip


def drafter_label(kind: str) -> str:
    return DRAFTER_LABELS.get(kind, kind)


@dataclass(frozen=True)
class Settings:
    """What the sidebar says: config is None (and error set) when the widgets don't make a valid RunConfig."""

    config: RunConfig | None
    prompt: str
    compare: str | None  # the second drafter kind in compare mode ("none" = plain decoding); None = off
    play_every_s: float
    error: str | None = None
    policy: Policy | None = None  # the rules this config was checked against (None: not checked)
    compare_tree_width: int = 1  # run B's tree width in compare mode (1 = a chain)

    def compare_config(self) -> RunConfig | None:
        """The main config with the drafter and tree width swapped for run B's; raises ValueError if run B can't run
        (a drafter that cannot branch asked for a tree, or run B the same as run A)."""
        if self.config is None or self.compare is None:
            return None
        width = self.compare_tree_width
        if width > 1 and self.compare not in TREE_DRAFTERS:
            raise ValueError(
                f"the {drafter_label(self.compare)} drafter drafts chains only, so run B cannot be a tree of width {width}; "
                f"set the compare tree width to 1 or pick {', '.join(TREE_DRAFTERS)}."
            )
        compare = dataclasses.replace(self.config, drafter=self.compare, tree_width=width)
        if self.compare == self.config.drafter and _branches(compare) == _branches(self.config):
            raise ValueError("run B would repeat run A; change its drafter or its tree width.")
        return compare


def _branches(config: RunConfig) -> int:
    """The tree width a run really drafts with (drafters that cannot branch draft chains whatever the width)."""
    return config.tree_width if config.drafter in TREE_DRAFTERS else 1


def _default(key: str, value) -> None:
    """Seed a widget's value through session state, so callbacks may change it later without warnings."""
    if key not in st.session_state:
        st.session_state[key] = value


def _apply_pair() -> None:
    pair = MODEL_PAIRS.get(st.session_state["model_pair"])
    if pair is None:
        return
    st.session_state["target"], st.session_state["draft_model"] = pair
    if pair[1]:
        st.session_state["drafter"] = "model"
    elif st.session_state.get("drafter") == "model":
        st.session_state["drafter"] = DEFAULTS.drafter if DEFAULTS.drafter != "model" else "lookup"


def _apply_example() -> None:
    examples = {e.label: e.prompt for e in load_examples()}
    if st.session_state["example"] in examples:
        st.session_state["prompt"] = examples[st.session_state["example"]]


def allowed_drafters(policy: Policy) -> list[str]:
    """The drafter menu: the draft-model drafter only where some draft model may be chosen."""
    if policy.allow_custom_models or policy.drafts:
        return list(DRAFTER_KINDS)
    return [d for d in DRAFTER_KINDS if d != "model"]


def refuse_forced(policy: Policy) -> None:
    """Check what session state holds for the sidebar's keys before the widgets draw (a URL parameter or a script may
    have put anything there): refuse what the owner did not allow, cap what is over a limit, drop what is not valid."""
    state = st.session_state
    opt_ins = (("trust_remote_code", "trust remote code", policy.allow_remote_code),
               ("allow_pickle", "allow pickle checkpoints", policy.allow_pickle),
               ("allow_download", "allow downloads", policy.allow_download))  # fmt: skip
    for key, label, allowed in opt_ins:
        if state.get(key) and not allowed:
            refused(f"'{label}' is not allowed on this shared server; it stays off.")
            state[key] = False
    target = state.get("target")
    if not isinstance(target, str) or (target.strip() and not policy.allows_target(target)):
        refused(f"The target {target!r} is not on this server's list; using {policy.default_target!r}.")
        state["target"] = policy.default_target
    draft = state.get("draft_model")
    if not isinstance(draft, str) or (draft.strip() and not policy.allows_draft(draft)):
        refused(f"The draft model {draft!r} is not on this server's list.")
        state["draft_model"] = NO_DRAFT
    for key, choices in (("device", DEVICES), ("dtype", DTYPES)):
        value = state.get(key, "auto")
        if value not in choices or (value != "auto" and not policy.allow_device):
            refused(f"{key} {value!r} is not allowed on this server; using auto.")
            state[key] = "auto"
    drafter = state.get("drafter")
    if drafter not in allowed_drafters(policy):
        refused(f"The drafter {drafter!r} is not available on this server; using {DEFAULTS.drafter!r}.")
        state["drafter"] = DEFAULTS.drafter
    for key, high, what in (("num_draft_tokens", min(MAX_DRAFT_TOKENS, policy.max_draft_tokens), "k"),
                            ("max_new_tokens", policy.max_new_tokens, "max new tokens")):  # fmt: skip
        value = state.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            refused(f"{what} {value!r} is not a whole number of at least 1; using {min(high, getattr(DEFAULTS, key))}.")
            state[key] = min(high, getattr(DEFAULTS, key))
        elif value > high:
            limited(f"{what} is limited to {high} on this server (asked for {value}).")
            state[key] = high
    for key, (kind, low, high) in NUMBERS.items():
        value = state.get(key)
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


def sidebar() -> Settings:
    """Draw the sidebar and return the settings it describes."""
    restore_from_query()  # a share link's settings (specviz/ui/share.py), before any widget exists
    policy = current_policy(report=True)
    examples = load_examples()
    _default("example", examples[0].label)
    _default("prompt", examples[0].prompt)
    _default("model_pair", next(iter(MODEL_PAIRS)))
    _default("target", policy.default_target)
    _default("draft_model", NO_DRAFT)
    _default("drafter", DEFAULTS.drafter)
    _default("num_draft_tokens", min(DEFAULTS.num_draft_tokens, policy.max_draft_tokens))
    _default("temperature", DEFAULTS.temperature)
    _default("seed", DEFAULTS.seed)
    _default("max_new_tokens", min(DEFAULTS.max_new_tokens, policy.max_new_tokens))
    refuse_forced(policy)
    max_k = min(MAX_DRAFT_TOKENS, policy.max_draft_tokens)
    sb = st.sidebar
    with sb:
        if policy.shared:
            st.caption("🔒 Shared server: the person running it chose the models and limits (max new tokens "
                       f"{policy.max_new_tokens}, k up to {max_k}). Your runs are yours alone.")
        st.selectbox("Example prompt", [e.label for e in examples], key="example", on_change=_apply_example)
        prompt = st.text_area("Prompt", key="prompt", height=150, help="Sent as a user turn through the chat template (see Models).")

        st.subheader("Drafter")
        kinds = allowed_drafters(policy)
        drafter = st.selectbox("Drafter", kinds, key="drafter", format_func=drafter_label)
        k = st.slider("k: tokens drafted per round", 1, max_k, key="num_draft_tokens", disabled=drafter == "none")
        tree_width = st.slider(
            "tree width: children per node (1 = a chain)", 1, MAX_TREE_WIDTH, value=DEFAULTS.tree_width, key="tree_width",
            disabled=drafter in ("none", "lookup"), help="Draft a token tree of at most k nodes (n-gram, draft model, early exit) and verify every node in one pass.",
        )  # fmt: skip
        adaptive_k = st.toggle("adaptive k", value=DEFAULTS.adaptive_k, key="adaptive_k", help="Grow k by 2 after a round where every draft was kept, shrink by 1 after a rejection.")
        compare = st.selectbox(
            "Compare side by side with",
            [COMPARE_OFF] + kinds,
            key="compare",
            format_func=lambda d: d if d == COMPARE_OFF else drafter_label(d),
            help="Runs the same prompt and seed with a second drafter (or plain decoding, or the same drafter with another tree width), a round of each per Step.",
        )
        compare_width = 1
        if compare != COMPARE_OFF:
            compare_width = st.slider(
                "compare: run B's tree width (1 = a chain)", 1, MAX_TREE_WIDTH, value=1, key="compare_tree_width",
                help="Set a chain against a tree: the same drafter with another width, or another drafter as a tree (n-gram, draft model, early exit).",
            )  # fmt: skip
        kinds_in_use = {drafter, compare}
        ngram_max, threshold, exit_layer = DEFAULTS.ngram_max, DEFAULTS.ngram_threshold, 0
        if kinds_in_use & {"lookup", "ngram"}:
            ngram_max = st.slider("n: longest n-gram matched", DEFAULTS.ngram_min, 8, value=DEFAULTS.ngram_max, key="ngram_max")
        if "ngram" in kinds_in_use:
            threshold = st.slider("n-gram: stop drafting when q's top mass falls below", 0.0, 1.0, value=DEFAULTS.ngram_threshold, step=0.05, key="ngram_threshold")
        if "early-exit" in kinds_in_use:
            exit_layer = st.number_input("early exit: layers L the draft runs (0 = auto, ~93% of the depth)", 0, 200, value=0, key="exit_layer")

        st.subheader("Sampling")
        temperature = st.slider("temperature (0 = greedy)", 0.0, 2.0, step=0.05, key="temperature")
        top_k = st.number_input("top-k (0 = off)", 0, 100_000, value=DEFAULTS.top_k, key="top_k")
        top_p = st.slider("top-p (1 = off)", 0.05, 1.0, value=DEFAULTS.top_p, step=0.05, key="top_p")
        seed = st.number_input("seed", 0, 2**31 - 1, key="seed")
        max_new = st.number_input("max new tokens", 1, min(MAX_NEW_TOKENS, policy.max_new_tokens), key="max_new_tokens")
        pace = st.select_slider("Play: seconds per round", PLAY_PACES, value=0.5, key="play_every")

        with st.expander("Models", expanded=False):
            if policy.allow_custom_models:
                st.selectbox("Model pair", list(MODEL_PAIRS) + [CUSTOM], key="model_pair", on_change=_apply_pair)
                target = st.text_input("Target model: hub id, local folder or .gguf", key="target")
                draft = st.text_input("Draft model (for the draft-model drafter)", key="draft_model", help="Must share the target's tokenizer.")
            else:  # participants pick from the owner's lists; nothing typed reaches the loader
                if st.session_state["target"] not in policy.targets:
                    st.session_state["target"] = policy.default_target
                target = st.selectbox("Target model (this server's list)", list(policy.targets), key="target")
                drafts = [NO_DRAFT] + [d for d in policy.drafts if d != NO_DRAFT]
                if st.session_state["draft_model"] not in drafts:
                    st.session_state["draft_model"] = NO_DRAFT
                draft = NO_DRAFT
                if len(drafts) > 1:
                    draft = st.selectbox("Draft model (this server's list)", drafts, key="draft_model", format_func=lambda d: d or "none")
            device = dtype = "auto"
            if policy.allow_device:
                device = st.selectbox("Device", list(DEVICES), key="device")
                dtype = st.selectbox("dtype", list(DTYPES), key="dtype")
            _default("chat", DEFAULTS.chat)
            chat = st.toggle("chat template", key="chat", help="Wrap the prompt as a user turn; off feeds it raw.")
            allow_download = trust = allow_pickle = False
            if policy.allow_download:
                _default("allow_download", False)
                allow_download = st.checkbox("allow downloads from the hub", key="allow_download", help="Off: hub ids load only from the local cache, so an offline machine fails at once.")
            if policy.allow_remote_code:
                _default("trust_remote_code", False)
                trust = st.checkbox("trust remote code", key="trust_remote_code", help="Runs code shipped in a model repository. Only for repositories you trust.")
            if policy.allow_pickle:
                _default("allow_pickle", False)
                allow_pickle = st.checkbox("allow pickle checkpoints", key="allow_pickle", help="Loads .bin/.pt weights, which can run code when unpickled. Only for files you trust; safetensors and GGUF need no opt-in.")

    fields = dict(
        target=target.strip() or EMBEDDED_TARGET,
        draft=draft.strip() or None,
        drafter=drafter,
        exit_layer=int(exit_layer) or None,
        ngram_max=int(ngram_max),
        ngram_min=DEFAULTS.ngram_min,
        num_draft_tokens=int(k),
        adaptive_k=bool(adaptive_k),
        tree_width=int(tree_width),
        temperature=float(temperature),
        top_k=int(top_k),
        top_p=float(top_p),
        seed=int(seed),
        max_new_tokens=int(max_new),
        chat=bool(chat),
        device=device,
        dtype=dtype,
        trust_remote_code=bool(trust),
        allow_download=bool(allow_download),
        allow_pickle=bool(allow_pickle),
        ngram_threshold=float(threshold),
    )
    compare_kind = None if compare == COMPARE_OFF else compare
    try:
        config = enforce(policy, RunConfig(**fields))
    except ValueError as exc:
        return Settings(None, prompt, compare_kind, float(pace), error=str(exc), policy=policy, compare_tree_width=int(compare_width))
    return Settings(config, prompt, compare_kind, float(pace), policy=policy, compare_tree_width=int(compare_width))
