"""Sidebar widgets -> one RunConfig plus the prompt and the UI-only options.

Widget keys are a contract for automation and tests: prompt, num_draft_tokens, temperature, drafter, seed
(and the buttons step, run_all, reset on the page).

The owner's policy (specviz.workshop.policy) is enforced here, where the widgets become a RunConfig: options participants may
not choose are not drawn, and a value forced into session state (a URL parameter, a script) is refused with an
error and replaced by the safe default, both before the widgets draw and again on the finished RunConfig."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import streamlit as st

from specviz.config import DRAFT_VOCAB_CHOICES, DRAFTER_KINDS, EMBEDDED_TARGET, MAX_NEW_TOKENS, RunConfig
from specviz.core.decoding import MAX_DRAFT_TOKENS
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import TREE_KINDS, branches, drafter_label, drafter_spec, short_name
from specviz.ui import widgets
from specviz.ui.access import current_policy, limited, refused, replica_footer
from specviz.ui.presets import CUSTOM, MODEL_PAIRS
from specviz.ui.prompts import load_examples
from specviz.ui.share import restore_from_query
from specviz.workshop.policy import Policy

CUSTOM_PROMPT = "custom"  # the Example prompt menu when the prompt is none of the examples (typed, or from a link)
DEFAULTS = RunConfig()  # the sidebar starts from the engine's defaults (drafter, k, n-gram settings, ...)
COMPARE_OFF = "off"
PLAY_PACES = (0.25, 0.5, 1.0, 2.0)  # seconds between auto-steps
DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("auto", "float32", "fp16-weights", "bfloat16", "float16")  # int8-dynamic is the numerics lab's alone
NO_DRAFT = ""
SHIPPED_HEADS = ""  # the Medusa heads field left empty: the heads shipped for the embedded target (RunConfig.medusa_heads None)
# numeric widgets: key -> (type, low, high); a forced value outside is refused before the widget would choke on it
NUMBERS: dict[str, tuple[type, float, float]] = {
    "temperature": (float, 0.0, 2.0), "top_k": (int, 0, 100_000), "top_p": (float, 0.05, 1.0), "seed": (int, 0, 2**31 - 1),
    "ngram_max": (int, DEFAULTS.ngram_min, 8), "ngram_threshold": (float, 0.0, 1.0), "exit_layer": (int, 0, 200),
    "compare_tree_width": (int, 1, MAX_TREE_WIDTH),
}  # fmt: skip


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
        if width > 1 and not drafter_spec(self.compare).can_branch:
            raise ValueError(
                f"the {drafter_label(self.compare)} drafter drafts chains only, so run B cannot be a tree of width {width}; "
                f"set the compare tree width to 1 or pick {', '.join(TREE_KINDS)}."
            )
        compare = dataclasses.replace(self.config, drafter=self.compare, tree_width=width)
        if self.compare == self.config.drafter and branches(compare.drafter, width) == branches(self.config.drafter, self.config.tree_width):
            raise ValueError("run B would repeat run A; change its drafter or its tree width.")
        return compare


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


def example_for(prompt: object, examples) -> str:
    """The Example prompt menu's entry for this prompt: the example it is, else CUSTOM_PROMPT."""
    return next((e.label for e in examples if e.prompt == prompt), CUSTOM_PROMPT)


def _apply_example() -> None:
    examples = {e.label: e.prompt for e in load_examples()}
    if st.session_state["example"] in examples:  # "custom" keeps the prompt as typed
        st.session_state["prompt"] = examples[st.session_state["example"]]


def _match_example() -> None:
    """A typed (or edited) prompt moves the Example prompt menu to its example, or to custom."""
    st.session_state["example"] = example_for(st.session_state.get("prompt"), load_examples())


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
    for key, high, what in (("num_draft_tokens", min(MAX_DRAFT_TOKENS, policy.max_draft_tokens), "k"),
                            ("max_new_tokens", policy.max_new_tokens, "max new tokens")):  # fmt: skip
        value = widgets.held(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            refused(f"{what} {value!r} is not a whole number of at least 1; using {min(high, getattr(DEFAULTS, key))}.")
            state[key] = min(high, getattr(DEFAULTS, key))
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


def _seed_defaults(policy: Policy) -> list:
    """Seed every widget's first value (the example prompt, the models, the engine's defaults within the policy)."""
    examples = load_examples()
    _default("prompt", examples[0].prompt)
    _default("example", example_for(st.session_state["prompt"], examples))  # a share link's prompt reads "custom"
    _default("model_pair", next(iter(MODEL_PAIRS)))
    _default("target", policy.default_target)
    _default("draft_model", NO_DRAFT)
    _default("drafter", DEFAULTS.drafter)
    _default("num_draft_tokens", min(DEFAULTS.num_draft_tokens, policy.max_draft_tokens))
    _default("temperature", DEFAULTS.temperature)
    _default("seed", DEFAULTS.seed)
    _default("max_new_tokens", min(DEFAULTS.max_new_tokens, policy.max_new_tokens))
    return examples


def _drafter_widgets(policy: Policy, max_k: int, with_compare: bool = True) -> tuple[dict, str, int]:
    """The Drafter section -> (RunConfig fields, the compare choice, run B's tree width). with_compare=False: no compare
    menu (a page that runs one drafter), compare off."""
    st.subheader("Drafter")
    kinds = allowed_drafters(policy)
    drafter = widgets.selectbox("Drafter", kinds, key="drafter", format_func=drafter_label)
    spec = drafter_spec(drafter)
    k = widgets.slider("k: tokens drafted per round", 1, max_k, key="num_draft_tokens", disabled=spec.baseline, reset=min(DEFAULTS.num_draft_tokens, max_k))
    tree_width = widgets.slider(
        "tree width: children per node (1 = a chain)", 1, MAX_TREE_WIDTH, value=DEFAULTS.tree_width, key="tree_width",
        disabled=not spec.can_branch, help=f"Draft a token tree of at most k nodes ({', '.join(map(short_name, TREE_KINDS))}) and verify every node in one pass.",
    )  # fmt: skip
    adaptive_k = widgets.toggle("adaptive k", value=DEFAULTS.adaptive_k, key="adaptive_k", help="Grow k by 2 after a round where every draft was kept, shrink by 1 after a rejection.")
    compare = COMPARE_OFF
    if with_compare:
        compare = widgets.selectbox(
            "Compare side by side with",
            [COMPARE_OFF] + kinds,
            key="compare",
            format_func=lambda d: d if d == COMPARE_OFF else drafter_label(d),
            help="Runs the same prompt and seed with a second drafter (or plain decoding, or the same drafter with another tree width), a round of each per Step.",
        )
    compare_width = 1
    if compare != COMPARE_OFF:
        compare_width = widgets.slider(
            "compare: run B's tree width (1 = a chain)", 1, MAX_TREE_WIDTH, value=1, key="compare_tree_width",
            help=f"Set a chain against a tree: the same drafter with another width, or another drafter as a tree ({', '.join(map(short_name, TREE_KINDS))}).",
        )  # fmt: skip
    kinds_in_use = {drafter, compare}
    ngram_max, threshold, exit_layer = DEFAULTS.ngram_max, DEFAULTS.ngram_threshold, 0
    if kinds_in_use & {"lookup", "ngram"}:
        ngram_max = widgets.slider("n: longest n-gram matched", DEFAULTS.ngram_min, 8, value=DEFAULTS.ngram_max, key="ngram_max")
    if "ngram" in kinds_in_use:
        threshold = widgets.slider("n-gram: stop drafting when its confidence falls below", 0.0, 1.0, value=DEFAULTS.ngram_threshold, step=0.05, key="ngram_threshold")
    if "early-exit" in kinds_in_use:
        exit_layer = widgets.number_input("early exit: layers L the draft runs (0 = auto, ~93% of the depth)", 0, 200, value=0, key="exit_layer")
    specs = [drafter_spec(d) for d in kinds_in_use if d != COMPARE_OFF]
    heads = _heads_widget(policy, "medusa_heads", "Medusa heads") if any(s.lm == "heads" for s in specs) else SHIPPED_HEADS
    eagle = _heads_widget(policy, "eagle_head", "EAGLE head") if any(s.lm == "eagle" for s in specs) else SHIPPED_HEADS
    draft_vocab = 0
    if any(s.cuts_vocab for s in specs):
        draft_vocab = widgets.selectbox(
            "draft vocabulary (Medusa, EAGLE)", list(DRAFT_VOCAB_CHOICES), key="draft_vocab", format_func=lambda v: f"the {v:,} tokens the target says most" if v else "the full vocabulary",
            help="Score only the V' tokens the target emits most often (the heads' token counts): the LM-head read, most of a drafting step, shrinks with V'; q stays a real distribution, zero outside V', so the output is still the target's.",
        )  # fmt: skip
    fields = dict(
        drafter=drafter, num_draft_tokens=int(k), tree_width=int(tree_width), adaptive_k=bool(adaptive_k), ngram_max=int(ngram_max),
        ngram_min=DEFAULTS.ngram_min, ngram_threshold=float(threshold), exit_layer=int(exit_layer) or None,
        medusa_heads=heads.strip() or None, eagle_head=eagle.strip() or None, draft_vocab=int(draft_vocab),
    )  # fmt: skip
    return fields, compare, int(compare_width)


def _heads_widget(policy: Policy, key: str, what: str) -> str:
    """A heads folder (Medusa's or EAGLE's): typed where custom models are allowed, else the owner's list of heads
    folders (SHIPPED_HEADS: the shipped ones)."""
    if policy.allow_custom_models:
        return widgets.text_input(
            f"{what} folder (empty = the one shipped for the embedded target)", key=key, reset=SHIPPED_HEADS,
            help=f"A folder of {what} trained for this target (python -m specviz train-heads); heads for another target are refused.",
        )  # fmt: skip
    options = [SHIPPED_HEADS] + [h for h in policy.allowed_medusa_heads if h != SHIPPED_HEADS]
    if len(options) == 1:
        return SHIPPED_HEADS
    if st.session_state.get(key, SHIPPED_HEADS) not in options:
        st.session_state[key] = SHIPPED_HEADS
    shipped = "the shipped heads" if key == "medusa_heads" else "the shipped head"
    return widgets.selectbox(f"{what} (this server's list)", options, key=key, format_func=lambda h: h or shipped)


def _sampling_widgets(policy: Policy, with_play: bool = True) -> tuple[dict, float]:
    """The Sampling section -> (RunConfig fields, Play's seconds per round; without the Play pace, its default)."""
    st.subheader("Sampling")
    temperature = widgets.slider("temperature (0 = greedy)", 0.0, 2.0, step=0.05, key="temperature", reset=DEFAULTS.temperature)
    top_k = widgets.number_input("top-k (0 = off)", 0, 100_000, value=DEFAULTS.top_k, key="top_k")
    top_p = widgets.slider("top-p (1 = off)", 0.05, 1.0, value=DEFAULTS.top_p, step=0.05, key="top_p")
    seed = widgets.number_input("seed", 0, 2**31 - 1, key="seed", reset=DEFAULTS.seed)
    new_cap = min(MAX_NEW_TOKENS, policy.max_new_tokens)
    max_new = widgets.number_input("max new tokens", 1, new_cap, key="max_new_tokens", reset=min(DEFAULTS.max_new_tokens, new_cap))
    pace = widgets.select_slider("Play: seconds per round", PLAY_PACES, value=0.5, key="play_every") if with_play else 0.5
    fields = dict(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p), seed=int(seed), max_new_tokens=int(max_new))
    return fields, float(pace)


def _model_choice(policy: Policy) -> tuple[str, str]:
    """(target, draft) as typed (the owner allows custom models) or picked from the owner's lists."""
    if policy.allow_custom_models:
        widgets.selectbox("Model pair", list(MODEL_PAIRS) + [CUSTOM], key="model_pair", on_change=_apply_pair)
        target = widgets.text_input("Target model: hub id, local folder or .gguf", key="target", reset=policy.default_target)
        draft = widgets.text_input("Draft model (for the draft-model drafter)", key="draft_model", reset=NO_DRAFT, help="Must share the target's tokenizer.")
        return target, draft
    # participants pick from the owner's lists; nothing typed reaches the loader
    if st.session_state["target"] not in policy.targets:
        st.session_state["target"] = policy.default_target
    target = widgets.selectbox("Target model (this server's list)", list(policy.targets), key="target")
    drafts = [NO_DRAFT] + [d for d in policy.drafts if d != NO_DRAFT]
    if st.session_state["draft_model"] not in drafts:
        st.session_state["draft_model"] = NO_DRAFT
    draft = NO_DRAFT
    if len(drafts) > 1:
        draft = widgets.selectbox("Draft model (this server's list)", drafts, key="draft_model", format_func=lambda d: d or "none")
    return target, draft


def _model_widgets(policy: Policy) -> dict:
    """The Models expander -> RunConfig fields (what the owner does not allow stays at its safe default)."""
    with st.expander("Models", expanded=False):
        target, draft = _model_choice(policy)
        device = dtype = "auto"
        if policy.allow_device:
            device = widgets.selectbox("Device", list(DEVICES), key="device")
            dtype = widgets.selectbox("dtype", list(DTYPES), key="dtype")
        _default("chat", DEFAULTS.chat)
        chat = widgets.toggle("chat template", key="chat", reset=DEFAULTS.chat, help="Wrap the prompt as a user turn; off feeds it raw.")
        allow_download = trust = allow_pickle = False
        if policy.allow_download:
            _default("allow_download", False)
            allow_download = widgets.checkbox("allow downloads from the hub", key="allow_download", help="Off: hub ids load only from the local cache, so an offline machine fails at once.")
        if policy.allow_remote_code:
            _default("trust_remote_code", False)
            trust = widgets.checkbox("trust remote code", key="trust_remote_code", help="Runs code shipped in a model repository. Only for repositories you trust.")
        if policy.allow_pickle:
            _default("allow_pickle", False)
            allow_pickle = widgets.checkbox("allow pickle checkpoints", key="allow_pickle", help="Loads .bin/.pt weights, which can run code when unpickled. Only for files you trust; safetensors and GGUF need no opt-in.")
    return dict(
        target=target.strip() or EMBEDDED_TARGET, draft=draft.strip() or None, chat=bool(chat), device=device, dtype=dtype,
        trust_remote_code=bool(trust), allow_download=bool(allow_download), allow_pickle=bool(allow_pickle),
    )  # fmt: skip


def sidebar(*, with_compare: bool = True, with_play: bool = True) -> Settings:
    """Draw the sidebar and return the settings it describes. The race page leaves out compare mode and Play's pace
    (with_compare, with_play False); everything else, and the policy's checks, are the same path."""
    restore_from_query()  # a share link's settings (specviz/ui/share.py), before any widget exists
    policy = current_policy(report=True)
    _seed_defaults(policy)
    refuse_forced(policy)
    examples = _seed_defaults(policy)  # again: what refuse_forced dropped starts at its default
    max_k = min(MAX_DRAFT_TOKENS, policy.max_draft_tokens)
    with st.sidebar:
        if policy.shared:
            st.caption("🔒 Shared server: the person running it chose the models and limits (max new tokens "
                       f"{policy.max_new_tokens}, k up to {max_k}). Your runs are yours alone.")
        widgets.selectbox("Example prompt", [e.label for e in examples] + [CUSTOM_PROMPT], key="example", on_change=_apply_example)
        prompt = widgets.text_area("Prompt", key="prompt", reset=examples[0].prompt, height=150, on_change=_match_example, help="Sent as a user turn through the chat template (see Models).")
        drafter_fields, compare, compare_width = _drafter_widgets(policy, max_k, with_compare)
        sampling_fields, pace = _sampling_widgets(policy, with_play)
        model_fields = _model_widgets(policy)
        replica_footer()
    compare_kind = None if compare == COMPARE_OFF else compare
    try:
        config = enforce(policy, RunConfig(**model_fields, **drafter_fields, **sampling_fields))
    except ValueError as exc:
        return Settings(None, prompt, compare_kind, pace, error=str(exc), policy=policy, compare_tree_width=compare_width)
    return Settings(config, prompt, compare_kind, pace, policy=policy, compare_tree_width=compare_width)


def seed_from_run(config: RunConfig, prompt: str, compare: RunConfig | None = None) -> None:
    """Put a run's settings into the sidebar's widgets (a fork of the presenter's run: the sidebar then describes the
    run it continues). Call from a widget callback, before the sidebar draws; the policy still checks every value."""
    state = st.session_state
    fields = config.to_dict()
    for key in ("drafter", "num_draft_tokens", "tree_width", "adaptive_k", "ngram_max", "ngram_threshold", "temperature", "top_k", "top_p", "seed", "max_new_tokens", "chat", "target"):
        state[key] = fields[key]
    state["exit_layer"] = config.exit_layer or 0
    state["draft_vocab"] = config.draft_vocab
    state["draft_model"] = config.draft or NO_DRAFT
    state["prompt"] = prompt
    state["example"] = example_for(prompt, load_examples())
    state["compare"] = COMPARE_OFF if compare is None else compare.drafter
    state["compare_tree_width"] = 1 if compare is None else compare.tree_width
