"""RunConfig: everything a run needs, validated in one place. Imports neither streamlit nor transformers.

Each field is declared once, with its Setting (`setting(...)`), written as small parts: the default, its Check (the
range validate() checks), its Widget (the sidebar widget's kind, section, label, help, range and step), its Flag (the
command line's names and help), whether a share link (or a fork of the presenter's run) carries it, and its Cap (which
of the owner's policy limits caps it). FIELDS is that table, read by
RunConfig.validate, the sidebar and its wrong-type resets (specviz.ui.step_through.sidebar), the share-link parser
(specviz.ui.room.share), the CLI's run options (specviz.cli.options), seed_from_run and the policy's caps
(specviz.workshop.policy). A new setting is one field here; docs/development.md says how."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import asdict, dataclass
from typing import Any, Literal

from specviz.core.decoding import DecodeConfig
from specviz.core.limits import MAX_DRAFT_TOKENS, SEED_UI_MAX
from specviz.core.sampling import SamplingConfig
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import DRAFTER_KINDS, DRAFTERS, TREE_KINDS, DrafterKind, drafter_spec, short_name

__all__ = [
    "DRAFTER_KINDS", "EMBEDDED_TARGET", "FIELDS", "MAX_NEW_TOKENS", "MAX_PROMPT_CHARS", "MAX_PROMPT_TOKENS", "Cap", "Check", "DrafterKind", "Flag",
    "KPolicy", "RunConfig", "Setting", "Widget", "field_named", "setting", "settings_of", "validate_prompt",
]  # fmt: skip

KPolicy = Literal["auto", "adaptive", "fixed", "none"]  # RunConfig.k_policy
EMBEDDED_TARGET = "embedded:SmolLM2-135M-Instruct"  # same string as specviz.models.EMBEDDED_TARGET
MAX_PROMPT_CHARS = 20_000  # a cheap check before the tokenizer sees the text (a character is at most 4 byte-level tokens)
MAX_PROMPT_TOKENS = 131_072  # the engine's own ceiling on a prompt's tokens; the model's context usually bites first
MAX_NEW_TOKENS = 2048
MAX_PATH_CHARS = 1_000  # a folder path typed or read from a file
MAX_DRAFT_VOCAB = 1_000_000  # V' of a draft vocabulary; the target's vocabulary is the real limit (checked at load)
DRAFT_VOCAB_CHOICES = (0, 4096, 8192, 16384)  # the menu's V' (0: the full vocabulary); the model cards report these
DEVICES = ("auto", "cpu", "cuda", "mps")  # the sidebar's menu
DTYPES = ("auto", "float32", "fp16-weights", "bfloat16", "float16")  # int8-dynamic is the numerics lab's alone
DTYPE_HELP = (
    "auto (CPU: fp16-weights where fbgemm runs, else float32; CUDA: bfloat16), float32, fp16-weights "
    "(float16 weights, float32 math), bfloat16 or float16"
)
START = DRAFTERS[0].defaults  # the default drafter's measured best: the k, tree width and draft vocabulary a run starts at
NGRAM_RANGE = "Need {low} <= ngram_min <= ngram_max <= {high}; got {config.ngram_min} and {config.ngram_max}."
WidgetKind = Literal["slider", "number", "toggle", "checkbox", "select", "text"]
Section = Literal["drafter", "sampling", "models"]  # the sidebar's sections, in the order they are drawn
SECTIONS: tuple[Section, ...] = ("drafter", "sampling", "models")


@dataclass(frozen=True)
class Setting:
    """One RunConfig field: what checks it, draws it, parses it and caps it, flat for its readers. name, default and
    type are read off the dataclass field; the rest comes from its setting(...)'s parts (Check, Widget, Flag, Cap)."""

    name: str = ""
    default: Any = None
    type: type = object  # int, float, str or bool (from the annotation; None aside)
    optional: bool = False  # None is a value (unset: the engine picks)
    # validate(): the range a run accepts (None: no bound here; SamplingConfig checks top-k and top-p), the only
    # values it accepts, and the message a user gets (format fields: what, low, high, value, choices, config)
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    what: str = ""  # how validate's message names the field
    message: str | None = None  # None: "{what} must be between {low} and {high}; got {value}." (or "at least {low}")
    path: bool = False  # a folder path: validate_path(value, what)
    speculative_only: bool = False  # plain decoding ignores it: not checked for the baseline drafter
    drafter_only: bool = False  # changes only the drafter: plain decoding of the same run does not depend on it
    # the sidebar (specviz.ui.step_through.sidebar) and a share link (specviz.ui.room.share)
    widget: WidgetKind | None = None  # None: no widget (the field keeps its default there)
    section: Section | None = None
    label: str = ""
    help: str | None = None
    key: str = ""  # the widget's session-state key (default: the name)
    ui_low: float | None = None  # the widget's (and a link's) range, where narrower than low..high
    ui_high: float | None = None
    step: float | None = None
    menu: tuple | None = None  # a select widget's options, where not `choices`
    unset: Any = None  # the widget's value for None (0 in a number box, "" in a text box)
    seeded: bool = False  # its value is put in session state before it draws (a callback, a link or a fork may set it)
    carry: Literal["link", "fork"] | None = None  # "link": a share link may carry it (and a fork copies it); "fork": a fork only
    max_chars: int | None = None  # a text a link carries: at most this many characters
    # the command line (specviz.cli.options)
    flags: tuple[str, ...] = ()  # () : no flag
    flag_help: str | None = None  # argparse's help (%(default)s is the default)
    metavar: str | None = None
    negated: bool = False  # a store_true flag that turns the (True) default off: --no-chat
    # the owner's policy (specviz.workshop.policy)
    cap: str | None = None  # the Policy limit that caps it
    cap_message: str | None = None  # said when capped (format fields: limit, value); None: capped quietly
    short: str = ""  # how the sidebar's policy messages name it

    @property
    def widget_key(self) -> str:
        return self.key or self.name

    @property
    def widget_range(self) -> tuple[Any, Any]:
        """(low, high) of the widget and of a link's value."""
        low = self.ui_low if self.ui_low is not None else self.low
        high = self.ui_high if self.ui_high is not None else self.high
        return low, high

    def to_widget(self, value: Any) -> Any:
        """A config value as its widget holds it (None: the widget's unset value)."""
        return self.unset if value is None and self.optional else value

    def from_widget(self, value: Any) -> Any:
        """A widget's value as the config holds it."""
        if self.type is str and isinstance(value, str):
            value = value.strip() if self.optional else value
        if self.optional and value == self.unset:
            return None
        return self.type(value) if self.type in (int, float, bool) else value

    def check(self, value: Any, config: Any) -> None:
        """validate()'s check of this field alone: ValueError with a message a user can act on."""
        if value is None and self.optional:
            return
        if self.path:
            validate_path(value, self.what)
        bad = (self.choices is not None and value not in self.choices) or (self.low is not None and not value >= self.low) or (
            self.high is not None and not value <= self.high
        )  # "not >=": NaN is out of every range
        if bad:
            fmt = self.message or ("{what} must be at least {low}; got {value}." if self.high is None else "{what} must be between {low} and {high}; got {value}.")
            raise ValueError(fmt.format(what=self.what, low=_num(self.low), high=_num(self.high), value=value, config=config,
                                        choices=", ".join(map(str, self.choices or ()))))  # fmt: skip


def _num(x: float | None) -> Any:
    """A bound as a message shows it: 2.0 as 2, an int as it is (formats like {high:,} still apply)."""
    return int(x) if isinstance(x, float) and x.is_integer() else x


@dataclass(frozen=True)
class Check:
    """validate()'s rule for a field: the range it accepts (None: no bound here; SamplingConfig checks top-k and top-p),
    the only values it accepts, whether it is a folder path, and the message a user gets (format fields: what, low,
    high, value, choices, config; None: "{what} must be between {low} and {high}; got {value}.")."""

    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    what: str = ""  # how the message names the field (default: its name)
    message: str | None = None
    path: bool = False  # a folder path: validate_path(value, what)


@dataclass(frozen=True)
class Widget:
    """The field's sidebar widget (specviz.ui.step_through.sidebar), and the range a share link accepts for it."""

    kind: WidgetKind
    section: Section
    label: str
    help: str | None = None
    key: str = ""  # its session-state key (default: the field's name)
    low: float | None = None  # its (and a link's) range, where narrower than the Check's
    high: float | None = None
    step: float | None = None
    menu: tuple | None = None  # a select widget's options, where not the Check's choices
    unset: Any = None  # its value for None (0 in a number box, "" in a text box)
    seeded: bool = False  # its value is put in session state before it draws (a callback, a link or a fork may set it)


@dataclass(frozen=True, init=False)
class Flag:
    """The field's command-line flag (specviz.cli.options): its names, argparse's help (%(default)s is the default),
    its metavar, and whether it is a store_true flag that turns a True default off (--no-chat)."""

    names: tuple[str, ...]
    help: str | None
    metavar: str | None
    negated: bool

    def __init__(self, *names: str, help: str | None = None, metavar: str | None = None, negated: bool = False) -> None:
        for name, value in (("names", names), ("help", help), ("metavar", metavar), ("negated", negated)):
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class Cap:
    """The owner's Policy limit that caps the field (specviz.workshop.policy), what a user is told when it does (format
    fields: limit, value; None: capped quietly), and how the sidebar's policy messages name the field."""

    limit: str
    message: str | None = None
    short: str = ""


def setting(
    default: Any,
    check: Check = Check(),
    widget: Widget | None = None,
    flag: Flag | None = None,
    cap: Cap | None = None,
    *,
    carry: Literal["link", "fork"] | None = None,
    max_chars: int | None = None,
    speculative_only: bool = False,
    drafter_only: bool = False,
) -> Any:
    """A RunConfig field with its Setting, from its parts: the check validate() makes, the sidebar widget (None: none),
    the command-line flag (None: none), the owner's cap (None: none), and what a share link or a fork carries. The
    Setting reads them flat (name, default and type are filled in by settings_of)."""
    w = widget or Widget("text", "models", "")  # no widget: only its defaults are read
    f = flag or Flag()
    spec = Setting(
        low=check.low,
        high=check.high,
        choices=check.choices,
        what=check.what,
        message=check.message,
        path=check.path,
        speculative_only=speculative_only,
        drafter_only=drafter_only,
        widget=widget.kind if widget else None,
        section=widget.section if widget else None,
        label=w.label,
        help=w.help,
        key=w.key,
        ui_low=w.low,
        ui_high=w.high,
        step=w.step,
        menu=w.menu,
        unset=w.unset,
        seeded=w.seeded,
        carry=carry,
        max_chars=max_chars,
        flags=f.names,
        flag_help=f.help,
        metavar=f.metavar,
        negated=f.negated,
        cap=cap.limit if cap else None,
        cap_message=cap.message if cap else None,
        short=cap.short if cap else "",
    )
    return dataclasses.field(default=default, metadata={"setting": spec})


DRAFT_VOCAB_HELP = (
    "Score only the V' tokens the target emits most often (the heads' token counts): the LM-head read, most of a drafting "
    "step, shrinks with V'; q stays a real distribution, zero outside V', so the output is still the target's."
)
AUTO_K_HELP = (
    "Choose each round's k (a tree's node budget) before the round, from this machine's cost profile and this run's "
    "acceptance by position: 0, a plain pass, when no k pays. Off: the slider's k every round (or the adaptive rule)."
)
TREE_WIDTH_HELP = (
    f"Draft a token tree of at most k nodes ({', '.join(map(short_name, TREE_KINDS))}) and verify every node in one pass."
)
PICKLE_HELP = (
    "Loads .bin/.pt weights, which can run code when unpickled. Only for files you trust; safetensors and GGUF need no opt-in."
)


@dataclass(frozen=True)
class RunConfig:
    # hub id, local folder, .gguf file, or the embedded SmolLM2
    target: str = setting(
        EMBEDDED_TARGET,
        Check(what="a model id, folder or .gguf path"),
        Widget("text", "models", "Target model: hub id, local folder or .gguf"),
        Flag("--target", help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)"),
        carry="link",
        max_chars=300,
    )
    # only for drafter="model"
    draft: str | None = setting(
        None,
        widget=Widget(
            "text",
            "models",
            "Draft model (for the draft-model drafter)",
            help="Must share the target's tokenizer.",
            key="draft_model",
            unset="",
        ),
        flag=Flag("--draft", help="draft model for --drafter model (same tokenizer as the target)"),
        carry="fork",
        drafter_only=True,
    )
    # the offline default: no second model, a real q, fastest measured (scripts/compare_drafters.py)
    drafter: DrafterKind = setting(
        "ngram",
        Check(choices=DRAFTER_KINDS, message="Unknown drafter {value!r}; choose one of {choices}."),
        Widget("select", "drafter", "Drafter", seeded=True),
        Flag("--drafter", help="default: %(default)s"),
        carry="link",
        drafter_only=True,
    )
    # early exit: blocks of the target the draft runs; None picks ~93% of the depth
    exit_layer: int | None = setting(
        None,
        Check(low=1, what="The exit layer"),
        Widget(
            "number", "drafter", "early exit: layers L the draft runs (0 = auto, ~93% of the depth)", low=0, high=200, unset=0
        ),
        Flag("--exit-layer", help="early exit: target blocks the draft runs (default ~93%% of the depth)"),
        carry="fork",
        drafter_only=True,
    )
    # Medusa: a heads folder (Medusa's layout); None = the heads shipped for the embedded target
    medusa_heads: str | None = setting(
        None,
        Check(path=True, what="The Medusa heads folder"),
        Widget("text", "drafter", "Medusa heads", unset=""),
        Flag(
            "--medusa-heads",
            metavar="PATH",
            help="Medusa heads folder (Medusa's layout; default: the heads shipped for the embedded target)",
        ),
    )
    # EAGLE: a head folder (specviz.models.eagle); None = the head shipped for the embedded target
    eagle_head: str | None = setting(
        None,
        Check(path=True, what="The EAGLE head folder"),
        Widget("text", "drafter", "EAGLE head", unset=""),
        Flag("--eagle-head", metavar="PATH", help="EAGLE head folder (default: the head shipped for the embedded target)"),
    )
    # Medusa and EAGLE: score only the V' tokens the target says most often (0: the full vocabulary)
    draft_vocab: int = setting(
        START.draft_vocab,
        Check(
            low=0,
            high=MAX_DRAFT_VOCAB,
            message="The draft vocabulary is 0 (the full vocabulary) or up to {high:,} tokens; got {value}.",
        ),
        Widget(
            "select", "drafter", "draft vocabulary (Medusa, EAGLE)", help=DRAFT_VOCAB_HELP, menu=DRAFT_VOCAB_CHOICES, seeded=True
        ),
        Flag(
            "--draft-vocab",
            metavar="N",
            help="Medusa and EAGLE: score only the N tokens the target says most often (the heads' token counts; 0 = the full vocabulary)",
        ),
        carry="fork",
    )
    # prompt lookup and n-gram drafter: longest n-gram tried first
    ngram_max: int = setting(
        3,
        Check(low=1, high=16, message=NGRAM_RANGE),
        Widget("slider", "drafter", "n: longest n-gram matched", high=8),
        Flag("--ngram-max"),
        carry="fork",
        drafter_only=True,
    )
    # ... down to this one
    ngram_min: int = setting(1, Check(low=1, high=16, message=NGRAM_RANGE), flag=Flag("--ngram-min"), drafter_only=True)
    # n-gram drafter: stop drafting when its count-aware confidence falls below this
    ngram_threshold: float = setting(
        0.5,
        Check(low=0.0, high=1.0, message="The n-gram threshold is a probability between {low} and {high}; got {value}."),
        Widget("slider", "drafter", "n-gram: stop drafting when its confidence falls below", step=0.05),
        Flag(
            "--ngram-threshold",
            help="n-gram drafter: stop drafting when its top probability falls below this (default %(default)s)",
        ),
        carry="fork",
        drafter_only=True,
    )
    # k: a cap; the n-gram drafter stops earlier when its evidence runs out (scripts/drafter_defaults.py)
    num_draft_tokens: int = setting(
        START.num_draft_tokens,
        Check(low=1, high=MAX_DRAFT_TOKENS, what="Number of draft tokens k"),
        Widget("slider", "drafter", "k: tokens drafted per round", seeded=True),
        Flag("--num-draft-tokens", "-k", help="tokens drafted per round"),
        Cap("max_draft_tokens", "k is limited to {limit} tokens per round on this server (asked for {value}).", short="k"),
        carry="link",
        speculative_only=True,
        drafter_only=True,
    )
    # k: auto (specviz.core.auto_k); the adaptive rule, when on, takes its place
    auto_k: bool = setting(
        True,
        widget=Widget("toggle", "drafter", "k: auto (from this machine's costs)", help=AUTO_K_HELP, seeded=True),
        flag=Flag("--fixed-k", negated=True, help="draft the same k every round (or follow --adaptive-k) instead of k: auto"),
        carry="link",
        drafter_only=True,
    )
    adaptive_k: bool = setting(
        False,
        widget=Widget(
            "toggle",
            "drafter",
            "adaptive k",
            help="Grow k by 2 after a round where every draft was kept, shrink by 1 after a rejection (in place of k: auto).",
        ),
        flag=Flag("--adaptive-k", help="grow k after fully accepted rounds, shrink after rejections"),
        carry="fork",
        drafter_only=True,
    )
    # adaptive and auto k's ceiling; a shared server's policy lowers it to the owner's k cap (quietly)
    max_draft_tokens: int = setting(
        MAX_DRAFT_TOKENS,
        Check(low=1, high=MAX_DRAFT_TOKENS, what="The ceiling for adaptive and auto k"),
        Widget(
            "slider",
            "drafter",
            "k at most (auto picks each round's k up to this)",
            help="k: auto chooses each round's k before the round, from 0 (a plain pass, when no k pays) up to this; the round "
            "inspector says why. Turn auto off to draft the same k every round.",
            seeded=True,
        ),
        cap=Cap("max_draft_tokens", short="k at most"),
        carry="fork",
        drafter_only=True,
    )
    # children per node of a token tree (n-gram, model, early-exit drafters); 1 = a chain, k = node budget
    tree_width: int = setting(
        START.tree_width,
        Check(low=1, high=MAX_TREE_WIDTH, message="The tree width must be between {low} (a chain) and {high}; got {value}."),
        Widget("slider", "drafter", "tree width: children per node (1 = a chain)", help=TREE_WIDTH_HELP, seeded=True),
        Flag("--tree-width", help="children per node of a token tree (1 = a chain; k is then the node budget)"),
        carry="fork",
        drafter_only=True,
    )
    # 0 = greedy
    temperature: float = setting(
        0.0,
        Check(low=0.0, high=2.0, what="Temperature"),
        Widget("slider", "sampling", "temperature (0 = greedy)", step=0.05, seeded=True),
        Flag("--temperature", help="0 = greedy"),
        carry="link",
    )
    # 0 = off; SamplingConfig checks it
    top_k: int = setting(
        0,
        widget=Widget("number", "sampling", "top-k (0 = off)", low=0, high=100_000),
        flag=Flag("--top-k"),
        carry="link",
    )
    # 1 = off; SamplingConfig checks it
    top_p: float = setting(
        1.0,
        widget=Widget("slider", "sampling", "top-p (1 = off)", low=0.05, high=1.0, step=0.05),
        flag=Flag("--top-p"),
        carry="link",
    )
    seed: int = setting(
        0,
        Check(low=0, message="The seed must be >= {low}; got {value}."),
        Widget("number", "sampling", "seed", high=SEED_UI_MAX, seeded=True),
        Flag("--seed"),
        carry="link",
    )
    max_new_tokens: int = setting(
        64,
        Check(low=1, high=MAX_NEW_TOKENS, what="max new tokens"),
        Widget("number", "sampling", "max new tokens", seeded=True),
        Flag("--max-new-tokens"),
        Cap("max_new_tokens", "max new tokens is limited to {limit} on this server (asked for {value}).", short="max new tokens"),
        carry="link",
    )
    # wrap the prompt in the tokenizer's chat template
    chat: bool = setting(
        True,
        widget=Widget("toggle", "models", "chat template", help="Wrap the prompt as a user turn; off feeds it raw.", seeded=True),
        flag=Flag("--no-chat", negated=True, help="feed the prompt raw, without the chat template"),
        carry="fork",
    )
    device: str = setting("auto", widget=Widget("select", "models", "Device", menu=DEVICES), flag=Flag("--device"))
    dtype: str = setting("auto", widget=Widget("select", "models", "dtype", menu=DTYPES), flag=Flag("--dtype", help=DTYPE_HELP))
    trust_remote_code: bool = setting(
        False,
        widget=Widget(
            "checkbox",
            "models",
            "trust remote code",
            help="Runs code shipped in a model repository. Only for repositories you trust.",
            seeded=True,
        ),
        flag=Flag("--trust-remote-code", help="run code shipped in a model repository (only if you trust it)"),
    )
    allow_download: bool = setting(
        False,
        widget=Widget(
            "checkbox",
            "models",
            "allow downloads from the hub",
            help="Off: hub ids load only from the local cache, so an offline machine fails at once.",
            seeded=True,
        ),
        flag=Flag("--allow-download", help="let hub ids download (off by default: offline)"),
    )
    # local .bin/.pt checkpoints can run code when unpickled: opt-in only
    allow_pickle: bool = setting(
        False,
        widget=Widget("checkbox", "models", "allow pickle checkpoints", help=PICKLE_HELP, seeded=True),
        flag=Flag("--allow-pickle", help="load .bin/.pt checkpoints, which can run code (only if you trust them)"),
    )

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Every field against its Setting (in the table's order), then the rules between fields. The only place
        that says the 'model' drafter needs a draft model."""
        spec = drafter_spec(self.drafter)  # ValueError for an unknown kind
        if spec.needs_model and not (self.draft or "").strip():
            raise ValueError(DRAFT_MODEL_NEEDED)
        for s in settings_of(type(self)):
            if not (s.speculative_only and spec.baseline):
                s.check(getattr(self, s.name), self)
        if self.ngram_min > self.ngram_max:
            s = field_named("ngram_max")
            raise ValueError(NGRAM_RANGE.format(low=_num(s.low), high=_num(s.high), config=self))
        if self.adaptive_k and not spec.baseline and self.num_draft_tokens > self.max_draft_tokens:
            raise ValueError(f"k ({self.num_draft_tokens}) is above the ceiling for adaptive k ({self.max_draft_tokens}); lower k.")
        _ = self.sampling  # temperature >= 0, top-k, top-p: SamplingConfig checks them

    @property
    def k_policy(self) -> KPolicy:
        """How a round's k is chosen: "auto" (specviz.core.auto_k), "adaptive" (the adaptive rule, which takes auto's
        place when on), "fixed", or "none" for plain decoding."""
        if drafter_spec(self.drafter).baseline:
            return "none"
        return "adaptive" if self.adaptive_k else "auto" if self.auto_k else "fixed"

    @property
    def k_words(self) -> str:
        """The k policy as a caption says it: "k: auto", "k = 4", "k = 4 (adaptive)", "no drafts"."""
        policy = self.k_policy
        return {"auto": "k: auto", "fixed": f"k = {self.num_draft_tokens}", "adaptive": f"k = {self.num_draft_tokens} (adaptive)"}.get(policy, "no drafts")

    @property
    def k_ceiling(self) -> int:
        """The most tokens any round of this run may draft: k when fixed, else the ceiling adaptive or auto k grows to."""
        policy = self.k_policy
        return 0 if policy == "none" else self.num_draft_tokens if policy == "fixed" else max(self.num_draft_tokens, self.max_draft_tokens)

    @property
    def needs_draft_model(self) -> bool:
        """Its drafter drafts with a second model (validate() has checked one is named)."""
        return drafter_spec(self.drafter).needs_model

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)

    def decode_config(self, eos_token_ids: tuple[int, ...] = (), seed: int | None = None) -> DecodeConfig:
        return DecodeConfig(
            num_draft_tokens=0 if drafter_spec(self.drafter).baseline else self.num_draft_tokens,
            sampling=self.sampling,
            seed=self.seed if seed is None else seed,
            max_new_tokens=self.max_new_tokens,
            eos_token_ids=eos_token_ids,
            adaptive_k=self.k_policy == "adaptive",
            max_draft_tokens=self.max_draft_tokens,
            tree_width=self.tree_width,
        )

    def load_options(self) -> dict:
        """Keyword arguments for specviz.models.load_model (and the UI's cached get_model)."""
        return dict(
            device=self.device,
            dtype=self.dtype,
            trust_remote_code=self.trust_remote_code,
            allow_download=self.allow_download,
            allow_pickle=self.allow_pickle,
        )

    def to_dict(self) -> dict:
        return asdict(self)


DRAFT_MODEL_NEEDED = "The 'model' drafter needs a draft model: give a hub id or a local folder (--draft; Models in the sidebar)."


def _base_type(hint: Any) -> tuple[type, bool]:
    """(int | float | str | bool, whether None is allowed) of a field's annotation."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = type(None) in typing.get_args(hint)
    if typing.get_origin(hint) is Literal:
        return type(args[0]), False
    return (_base_type(args[0])[0] if args else hint), optional


def settings_of(cls: type) -> tuple[Setting, ...]:
    """The field table of a RunConfig class (a subclass may add fields), in declaration order."""
    cached = _TABLES.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls)
        rows = []
        for f in dataclasses.fields(cls):
            spec = f.metadata.get("setting")
            if spec is None:
                raise TypeError(f"{cls.__name__}.{f.name} has no setting(...): declare its default, range and widget there.")
            kind, optional = _base_type(hints[f.name])
            what = spec.what or f.name
            rows.append(dataclasses.replace(spec, name=f.name, default=f.default, type=kind, optional=optional, what=what, short=spec.short or what))
        cached = _TABLES[cls] = tuple(rows)
    return cached


_TABLES: dict[type, tuple[Setting, ...]] = {}
FIELDS: tuple[Setting, ...] = settings_of(RunConfig)
_BY_NAME = {s.name: s for s in FIELDS}


def field_named(name: str) -> Setting:
    """RunConfig's Setting for one field (KeyError for a name that is not a field)."""
    return _BY_NAME[name]


def validate_path(text: object, what: str) -> str:
    """A folder path from a widget, a flag or a file: non-empty text, at most MAX_PATH_CHARS, no control characters."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{what} is empty: give a folder path, or leave it unset for the default.")
    if len(text) > MAX_PATH_CHARS or any(ch < " " or ch == "\x7f" for ch in text):
        raise ValueError(f"{what} must be a path of at most {MAX_PATH_CHARS:,} printable characters.")
    return text


def validate_prompt(text: str) -> str:
    if not text or not text.strip():
        raise ValueError("The prompt is empty: type some text to continue.")
    if len(text) > MAX_PROMPT_CHARS:
        raise ValueError(f"The prompt is {len(text):,} characters; the limit is {MAX_PROMPT_CHARS:,}. Shorten it.")
    return text
