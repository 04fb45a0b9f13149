"""Sidebar widgets -> one RunConfig plus the prompt and the UI-only options.

Widget keys are a contract for automation and tests: prompt, num_draft_tokens, temperature, drafter, seed
(and the buttons step, run_all, reset on the page).

The owner's policy (specviz.workshop.policy) is enforced here, where the widgets become a RunConfig: options participants may
not choose are not drawn, and a value forced into session state (a URL parameter, a script) is refused with an
error and replaced by the safe default, both before the widgets draw and again on the finished RunConfig.

Each RunConfig field's widget (kind, label, help, range, step, first value) comes from its row of the field table
(specviz.config.FIELDS) through draw(); the sections place the fields they know by hand and draw any other field of
their section at the end (draw_rest), so a field added to the table appears without an edit here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import streamlit as st

from specviz.config import (
    EMBEDDED_TARGET,
    FIELDS,
    RunConfig,
    field_named,
)
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import TREE_KINDS, TUNED_FIELDS, DrafterSpec, branches, drafter_label, drafter_spec, short_name
from specviz.ui.common import widgets
from specviz.ui.common.access import current_policy, replica_footer
from specviz.ui.common.presets import CUSTOM, MODEL_PAIRS
from specviz.ui.common.prompts import load_examples
from specviz.ui.step_through.caps import (
    DEFAULTS,
    NO_DRAFT,
    SHIPPED_HEADS,
    allowed_drafters,
    enforce,
    first_value,
    refuse_forced,
    widget_high,
)
from specviz.workshop.policy import Policy

CUSTOM_PROMPT = "custom"  # the Example prompt menu when the prompt is none of the examples (typed, or from a link)
COMPARE_OFF = "off"
TUNED_FOR = "tuned_for"  # session key: the drafter the last run drew, whose defaults k, tree width and draft vocabulary follow
PLAY_PACES = (0.25, 0.5, 1.0, 2.0)  # seconds between auto-steps


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
        (a drafter that cannot branch asked for a tree, or run B the same as run A). Run B of another drafter takes that
        drafter's own measured best k and draft vocabulary (within the owner's k cap), as choosing it in the menu
        would; run B of the same drafter keeps run A's."""
        if self.config is None or self.compare is None:
            return None
        width = self.compare_tree_width
        if width > 1 and not drafter_spec(self.compare).can_branch:
            raise ValueError(
                f"the {drafter_label(self.compare)} drafter drafts chains only, so run B cannot be a tree of width {width}; "
                f"set the compare tree width to 1 or pick {', '.join(TREE_KINDS)}."
            )
        compare = dataclasses.replace(self.config, drafter=self.compare, tree_width=width)
        if self.compare != self.config.drafter:
            best = drafter_spec(self.compare).defaults
            k = best.num_draft_tokens if self.policy is None else min(best.num_draft_tokens, self.policy.max_draft_tokens)
            compare = dataclasses.replace(compare, num_draft_tokens=k, draft_vocab=best.draft_vocab)
        if self.compare == self.config.drafter and branches(compare.drafter, width) == branches(self.config.drafter, self.config.tree_width):
            raise ValueError("run B would repeat run A; change its drafter or its tree width.")
        return compare


def draw(name: str, policy: Policy, **overrides) -> Any:
    """The widget of one RunConfig field, drawn from its Setting (label, help, range, step, menu, first value); the
    value as the config holds it. overrides: what the page decides (options, disabled, format_func, ...)."""
    s = field_named(name)
    kw: dict[str, Any] = {"key": s.widget_key}
    if s.help is not None:
        kw["help"] = s.help
    if s.seeded:
        _default(s.widget_key, first_value(s, policy))
        kw["reset"] = first_value(s, policy)
    elif s.widget in ("slider", "number", "toggle", "checkbox"):
        kw["value"] = first_value(s, policy)
    if s.widget in ("slider", "number"):
        low = s.widget_range[0]
        if s.step is not None:
            kw["step"] = s.step
        draw_number = widgets.slider if s.widget == "slider" else widgets.number_input
        value = draw_number(s.label, overrides.pop("min_value", low), overrides.pop("max_value", widget_high(s, policy)), **kw | overrides)
    elif s.widget == "select":
        options = list(overrides.pop("options", s.choices or s.menu or ()))
        if not s.seeded:
            kw["index"] = options.index(s.default) if s.default in options else 0
        value = widgets.selectbox(s.label, options, **kw | overrides)
    elif s.widget in ("toggle", "checkbox"):
        value = (widgets.toggle if s.widget == "toggle" else widgets.checkbox)(s.label, **kw | overrides)
    elif s.widget == "text":
        value = widgets.text_input(s.label, **kw | {"reset": s.to_widget(s.default)} | overrides)
    else:
        raise ValueError(f"{name} has no widget in the field table (specviz.config)")
    return s.from_widget(value)


def draw_rest(section: str, placed: set[str], policy: Policy) -> dict:
    """The widgets of a section's fields that its function does not place by hand (a field newly added to the
    table appears here, at the end of its section): name -> value."""
    return {s.name: draw(s.name, policy) for s in FIELDS if s.section == section and s.widget and s.name not in placed}


def _default(key: str, value) -> None:
    """Seed a widget's value through session state, so callbacks may change it later without warnings."""
    if key not in st.session_state:
        st.session_state[key] = value


def _apply_pair(policy: Policy) -> None:
    pair = MODEL_PAIRS.get(st.session_state["model_pair"])
    if pair is None:
        return
    st.session_state["target"], st.session_state["draft_model"] = pair
    if pair[1]:
        st.session_state["drafter"] = "model"
    elif st.session_state.get("drafter") == "model":
        st.session_state["drafter"] = DEFAULTS.drafter if DEFAULTS.drafter != "model" else "lookup"
    _apply_drafter_defaults(policy)  # the drafter may have changed with the pair


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


def _seed_defaults(policy: Policy) -> list:
    """Seed every widget's first value (the example prompt, the models, the engine's defaults within the policy)."""
    examples = load_examples()
    _default("prompt", examples[0].prompt)
    _default("example", example_for(st.session_state["prompt"], examples))  # a share link's prompt reads "custom"
    _default("model_pair", next(iter(MODEL_PAIRS)))
    _default("target", policy.default_target)
    _default("draft_model", NO_DRAFT)
    for s in FIELDS:
        if s.seeded and s.widget != "text":  # the target and draft model start from the policy (above)
            _default(s.widget_key, first_value(s, policy))
    return examples


def tuned_value(name: str, spec: DrafterSpec, policy: Policy) -> Any:
    """The value a tuned field's widget (k, tree width, draft vocabulary) starts at for this drafter: its measured
    best, within the owner's limit."""
    s = field_named(name)
    value = s.to_widget(getattr(spec.defaults, name))
    return min(value, widget_high(s, policy)) if s.cap else value


def _apply_drafter_defaults(policy: Policy) -> None:
    """The drafter menu changed: each of k, tree width and draft vocabulary still at the outgoing drafter's default
    takes the new drafter's measured best; a value the user (or a share link, or a fork) set stays as it is."""
    state = st.session_state
    old, new = drafter_spec(state.get(TUNED_FOR, DEFAULTS.drafter)), drafter_spec(state["drafter"])
    for name in TUNED_FIELDS:
        key = field_named(name).widget_key
        if state.get(key, tuned_value(name, old, policy)) == tuned_value(name, old, policy):
            state[key] = tuned_value(name, new, policy)


def _start_linked_drafter(linked: Mapping[str, object], policy: Policy) -> None:
    """A share link named a drafter: what it left out of k, tree width and draft vocabulary starts at that drafter's
    measured best (a link leaves out a value equal to it, specviz.ui.room.share.link_for)."""
    spec = drafter_spec(linked["drafter"])
    for name in TUNED_FIELDS:
        key = field_named(name).widget_key
        if key not in linked:
            st.session_state[key] = tuned_value(name, spec, policy)


def best_note(spec: DrafterSpec, fields: dict, auto_ceiling: int | None = None) -> str | None:
    """The caption under k: this drafter's measured best, and whether the run uses it (None: never measured).
    auto_ceiling: k: auto is on with this ceiling, so the measured k is the fixed k's, not this run's."""
    if not spec.measured or spec.baseline:
        return None
    best = spec.defaults
    parts = [f"k = {best.num_draft_tokens}"]
    if best.tree_width > 1:
        parts.append(f"tree width {best.tree_width}")
    if best.draft_vocab:
        parts.append(f"draft vocabulary {best.draft_vocab:,}")
    link = "the Benchmark page's table of defaults, docs/benchmarks.md"  # words, not a link: captions here carry no links
    auto = "" if auto_ceiling is None else f" k: auto picks each round's k instead, up to {auto_ceiling}; turn it off to draft the measured k."
    if all(fields.get(name, getattr(best, name)) == getattr(best, name) for name in TUNED_FIELDS):
        return f"{', '.join(parts)}: this drafter's measured best here ({link}).{auto}"
    return f"This drafter's measured best here: {', '.join(parts)} ({link}); you changed it.{auto}"


DRAFTER_PLACED = {"drafter", "num_draft_tokens", "max_draft_tokens", "tree_width", "auto_k", "adaptive_k", "ngram_max", "ngram_threshold", "exit_layer", "medusa_heads", "eagle_head", "draft_vocab"}


def _drafter_widgets(policy: Policy, with_compare: bool = True) -> tuple[dict, str, int]:
    """The Drafter section -> (RunConfig fields, the compare choice, run B's tree width). with_compare=False: no compare
    menu (a page that runs one drafter), compare off. A field the section does not use keeps its default."""
    st.subheader("Drafter")
    kinds = allowed_drafters(policy)
    drafter = draw("drafter", policy, options=kinds, format_func=drafter_label, on_change=_apply_drafter_defaults, args=(policy,))
    st.session_state[TUNED_FOR] = drafter
    spec = drafter_spec(drafter)
    fields: dict[str, Any] = dict(drafter=drafter, auto_k=draw("auto_k", policy, disabled=spec.baseline), adaptive_k=draw("adaptive_k", policy))
    fields |= _k_widget(policy, auto=fields["auto_k"] and not fields["adaptive_k"] and not spec.baseline, disabled=spec.baseline)
    fields["tree_width"] = draw("tree_width", policy, disabled=not spec.can_branch)
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
    if kinds_in_use & {"lookup", "ngram"}:
        fields["ngram_max"] = draw("ngram_max", policy)
    if "ngram" in kinds_in_use:
        fields["ngram_threshold"] = draw("ngram_threshold", policy)
    if "early-exit" in kinds_in_use:
        fields["exit_layer"] = draw("exit_layer", policy)
    specs = [drafter_spec(d) for d in kinds_in_use if d != COMPARE_OFF]
    if any(s.source == "heads" for s in specs):
        fields["medusa_heads"] = _heads_widget(policy, "medusa_heads")
    if any(s.source == "eagle" for s in specs):
        fields["eagle_head"] = _heads_widget(policy, "eagle_head")
    if any(s.cuts_vocab for s in specs):
        fields["draft_vocab"] = draw("draft_vocab", policy, format_func=lambda v: f"the {v:,} tokens the target says most" if v else "the full vocabulary")
    note = best_note(spec, fields, auto_ceiling=fields.get("max_draft_tokens"))
    if note:
        st.caption(note)
    return fields | draw_rest("drafter", DRAFTER_PLACED, policy), compare, int(compare_width)


def _k_widget(policy: Policy, auto: bool, disabled: bool) -> dict:
    """k's slider. Under k: auto it is auto's ceiling (max_draft_tokens: "k at most"), else the k every round drafts
    (num_draft_tokens; the adaptive rule's first k); each field's label and help are its row of the field table. The
    slider not drawn keeps its value (k comes back as it was when auto is turned off) and the config still holds it."""
    shown, kept = ("max_draft_tokens", "num_draft_tokens") if auto else ("num_draft_tokens", "max_draft_tokens")
    s = field_named(kept)
    value = st.session_state.get(s.widget_key, first_value(s, policy))
    st.session_state[s.widget_key] = value  # a widget not drawn this run would lose its value at the run's end
    fields = {shown: draw(shown, policy, disabled=disabled)}
    if kept == "num_draft_tokens":  # the fixed k rides in the config (and a share link) while auto picks; the ceiling
        fields[kept] = s.from_widget(value)  # stays the engine's (the owner's cap) unless auto is on
    return fields


def _heads_widget(policy: Policy, name: str) -> str | None:
    """A heads folder (Medusa's or EAGLE's; None: the shipped ones): typed where custom models are allowed, else the
    owner's list of heads folders."""
    s = field_named(name)
    key, what = s.widget_key, s.label
    if policy.allow_custom_models:
        return s.from_widget(widgets.text_input(
            f"{what} folder (empty = the one shipped for the embedded target)", key=key, reset=SHIPPED_HEADS,
            help=f"A folder of {what} trained for this target (python -m specviz train-heads); heads for another target are refused.",
        ))  # fmt: skip
    options = [SHIPPED_HEADS] + [h for h in policy.allowed_medusa_heads if h != SHIPPED_HEADS]
    if len(options) == 1:
        return None
    if st.session_state.get(key, SHIPPED_HEADS) not in options:
        st.session_state[key] = SHIPPED_HEADS
    shipped = "the shipped heads" if key == "medusa_heads" else "the shipped head"
    return s.from_widget(widgets.selectbox(f"{what} (this server's list)", options, key=key, format_func=lambda h: h or shipped))


def _sampling_widgets(policy: Policy, with_play: bool = True) -> tuple[dict, float]:
    """The Sampling section -> (RunConfig fields, Play's seconds per round; without the Play pace, its default)."""
    st.subheader("Sampling")
    fields = draw_rest("sampling", set(), policy)  # temperature, top-k, top-p, seed, max new tokens: the table's order
    pace = widgets.select_slider("Play: seconds per round", PLAY_PACES, value=0.5, key="play_every") if with_play else 0.5
    return fields, float(pace)


def _model_choice(policy: Policy) -> tuple[str, str]:
    """(target, draft) as typed (the owner allows custom models) or picked from the owner's lists."""
    if policy.allow_custom_models:
        widgets.selectbox("Model pair", list(MODEL_PAIRS) + [CUSTOM], key="model_pair", on_change=_apply_pair, args=(policy,))
        target_s, draft_s = field_named("target"), field_named("draft")
        target = widgets.text_input(target_s.label, key=target_s.widget_key, reset=policy.default_target)
        draft = widgets.text_input(draft_s.label, key=draft_s.widget_key, reset=NO_DRAFT, help=draft_s.help)
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


MODELS_PLACED = {"target", "draft", "device", "dtype", "chat", "allow_download", "trust_remote_code", "allow_pickle"}
OPT_INS = {"allow_download": "allow_download", "trust_remote_code": "allow_remote_code", "allow_pickle": "allow_pickle"}  # field -> the Policy switch that shows it


def _model_widgets(policy: Policy) -> dict:
    """The Models expander -> RunConfig fields (what the owner does not allow stays at its safe default)."""
    with st.expander("Models", expanded=False):
        target, draft = _model_choice(policy)
        fields: dict[str, Any] = dict(target=target.strip() or EMBEDDED_TARGET, draft=draft.strip() or None)
        if policy.allow_device:
            fields.update(device=draw("device", policy), dtype=draw("dtype", policy))
        fields["chat"] = draw("chat", policy)
        for name in ("allow_download", "trust_remote_code", "allow_pickle"):
            if getattr(policy, OPT_INS[name]):
                fields[name] = draw(name, policy)
        fields |= draw_rest("models", MODELS_PLACED, policy)
    return fields


def sidebar(linked: Mapping[str, object] | None = None, *, with_compare: bool = True, with_play: bool = True) -> Settings:
    """Draw the sidebar and return the settings it describes. linked: the values a share link seeded into the widgets,
    once per session (the page calls specviz.ui.room.share.restore_from_query before the sidebar's widgets exist). The
    race page leaves out compare mode and Play's pace (with_compare, with_play False); everything else, and the
    policy's checks, are the same path."""
    policy = current_policy(report=True)
    if linked is not None and linked.get("drafter") in allowed_drafters(policy):
        _start_linked_drafter(linked, policy)
    _seed_defaults(policy)
    refuse_forced(policy)
    examples = _seed_defaults(policy)  # again: what refuse_forced dropped starts at its default
    max_k = widget_high(field_named("num_draft_tokens"), policy)
    with st.sidebar:
        if policy.shared:
            st.caption("🔒 Shared server: the person running it chose the models and limits (max new tokens "
                       f"{policy.max_new_tokens}, k up to {max_k}). Your runs are yours alone.")
        widgets.selectbox("Example prompt", [e.label for e in examples] + [CUSTOM_PROMPT], key="example", on_change=_apply_example)
        prompt = widgets.text_area("Prompt", key="prompt", reset=examples[0].prompt, height=150, on_change=_match_example, help="Sent as a user turn through the chat template (see Models).")
        drafter_fields, compare, compare_width = _drafter_widgets(policy, with_compare)
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
    run it continues): every field the table says a fork carries. Call from a widget callback, before the sidebar
    draws; the policy still checks every value."""
    state = st.session_state
    for s in FIELDS:
        if s.carry is not None:
            state[s.widget_key] = s.to_widget(getattr(config, s.name))
    state["prompt"] = prompt
    state["example"] = example_for(prompt, load_examples())
    state["compare"] = COMPARE_OFF if compare is None else compare.drafter
    state["compare_tree_width"] = 1 if compare is None else compare.tree_width
