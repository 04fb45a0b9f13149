"""RunConfig: everything a run needs, validated in one place. Imports neither streamlit nor transformers.

Each field is declared once, with its Setting (`setting(...)`): the default, the range validate() checks, the sidebar
widget's kind, label, help, range and step, the command line's flag and help, whether a share link (or a fork of the
presenter's run) carries it, and which of the owner's policy limits caps it. FIELDS is that table, read by
RunConfig.validate, the sidebar and its wrong-type resets (specviz.ui.step_through.sidebar), the share-link parser
(specviz.ui.room.share), the CLI's run options (specviz.cli.options), seed_from_run and the policy's caps
(specviz.workshop.policy). A new setting is one field here; docs/development.md says how."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import asdict, dataclass
from typing import Any, Literal

from specviz.core.decoding import MAX_DRAFT_TOKENS, DecodeConfig
from specviz.core.sampling import SamplingConfig
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import DRAFTER_KINDS, DRAFTERS, TREE_KINDS, DrafterKind, drafter_spec, short_name

__all__ = [
    "DRAFTER_KINDS", "EMBEDDED_TARGET", "FIELDS", "MAX_NEW_TOKENS", "MAX_PROMPT_CHARS", "MAX_PROMPT_TOKENS", "DrafterKind", "KPolicy", "RunConfig",
    "Setting", "field_named", "settings_of", "validate_prompt",
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
Widget = Literal["slider", "number", "toggle", "checkbox", "select", "text"]
Section = Literal["drafter", "sampling", "models"]  # the sidebar's sections, in the order they are drawn
SECTIONS: tuple[Section, ...] = ("drafter", "sampling", "models")


@dataclass(frozen=True)
class Setting:
    """One RunConfig field: what checks it, draws it, parses it and caps it. name, default and type are read off
    the dataclass field; the rest is written in its setting(...)."""

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
    widget: Widget | None = None  # None: no widget (the field keeps its default there)
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


def setting(default: Any, **spec: Any) -> Any:
    """A RunConfig field with its Setting (name, default and type are filled in by settings_of)."""
    return dataclasses.field(default=default, metadata={"setting": Setting(**spec)})


@dataclass(frozen=True)
class RunConfig:
    target: str = setting(  # hub id, local folder, .gguf file, or the embedded SmolLM2
        EMBEDDED_TARGET, widget="text", section="models", label="Target model: hub id, local folder or .gguf", carry="link", max_chars=300,
        what="a model id, folder or .gguf path", flags=("--target",), flag_help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)",
    )  # fmt: skip
    draft: str | None = setting(  # only for drafter="model"
        None, widget="text", section="models", key="draft_model", unset="", label="Draft model (for the draft-model drafter)",
        help="Must share the target's tokenizer.", carry="fork", drafter_only=True,
        flags=("--draft",), flag_help="draft model for --drafter model (same tokenizer as the target)",
    )  # fmt: skip
    drafter: DrafterKind = setting(  # the offline default: no second model, a real q, fastest measured (scripts/compare_drafters.py)
        "ngram", choices=DRAFTER_KINDS, message="Unknown drafter {value!r}; choose one of {choices}.", drafter_only=True,
        widget="select", section="drafter", label="Drafter", seeded=True, carry="link", flags=("--drafter",), flag_help="default: %(default)s",
    )  # fmt: skip
    exit_layer: int | None = setting(  # early exit: blocks of the target the draft runs; None picks ~93% of the depth
        None, low=1, what="The exit layer", drafter_only=True, widget="number", section="drafter", unset=0, ui_low=0, ui_high=200,
        label="early exit: layers L the draft runs (0 = auto, ~93% of the depth)", carry="fork",
        flags=("--exit-layer",), flag_help="early exit: target blocks the draft runs (default ~93%% of the depth)",
    )  # fmt: skip
    medusa_heads: str | None = setting(  # Medusa: a heads folder (Medusa's layout); None = the heads shipped for the embedded target
        None, path=True, what="The Medusa heads folder", widget="text", section="drafter", unset="", label="Medusa heads",
        flags=("--medusa-heads",), metavar="PATH", flag_help="Medusa heads folder (Medusa's layout; default: the heads shipped for the embedded target)",
    )  # fmt: skip
    eagle_head: str | None = setting(  # EAGLE: a head folder (specviz.models.eagle); None = the head shipped for the embedded target
        None, path=True, what="The EAGLE head folder", widget="text", section="drafter", unset="", label="EAGLE head",
        flags=("--eagle-head",), metavar="PATH", flag_help="EAGLE head folder (default: the head shipped for the embedded target)",
    )  # fmt: skip
    draft_vocab: int = setting(  # Medusa and EAGLE: score only the V' tokens the target says most often (0: the full vocabulary)
        START.draft_vocab, low=0, high=MAX_DRAFT_VOCAB, message="The draft vocabulary is 0 (the full vocabulary) or up to {high:,} tokens; got {value}.",
        widget="select", section="drafter", menu=DRAFT_VOCAB_CHOICES, label="draft vocabulary (Medusa, EAGLE)", seeded=True, carry="fork",
        help="Score only the V' tokens the target emits most often (the heads' token counts): the LM-head read, most of a drafting step, shrinks with V'; q stays a real distribution, zero outside V', so the output is still the target's.",
        flags=("--draft-vocab",), metavar="N",
        flag_help="Medusa and EAGLE: score only the N tokens the target says most often (the heads' token counts; 0 = the full vocabulary)",
    )  # fmt: skip
    ngram_max: int = setting(  # prompt lookup and n-gram drafter: longest n-gram tried first
        3, low=1, high=16, message=NGRAM_RANGE, drafter_only=True, widget="slider", section="drafter", ui_high=8,
        label="n: longest n-gram matched", carry="fork", flags=("--ngram-max",),
    )  # fmt: skip
    ngram_min: int = setting(1, low=1, high=16, message=NGRAM_RANGE, drafter_only=True, flags=("--ngram-min",))  # ... down to this one
    ngram_threshold: float = setting(  # n-gram drafter: stop drafting when its count-aware confidence falls below this
        0.5, low=0.0, high=1.0, message="The n-gram threshold is a probability between {low} and {high}; got {value}.", drafter_only=True,
        widget="slider", section="drafter", step=0.05, label="n-gram: stop drafting when its confidence falls below", carry="fork",
        flags=("--ngram-threshold",), flag_help="n-gram drafter: stop drafting when its top probability falls below this (default %(default)s)",
    )  # fmt: skip
    num_draft_tokens: int = setting(  # k: a cap; the n-gram drafter stops earlier when its evidence runs out (scripts/drafter_defaults.py)
        START.num_draft_tokens, low=1, high=MAX_DRAFT_TOKENS, what="Number of draft tokens k", speculative_only=True, drafter_only=True,
        widget="slider", section="drafter", label="k: tokens drafted per round", seeded=True, carry="link", flags=("--num-draft-tokens", "-k"), flag_help="tokens drafted per round",
        cap="max_draft_tokens", cap_message="k is limited to {limit} tokens per round on this server (asked for {value}).", short="k",
    )  # fmt: skip
    auto_k: bool = setting(  # k: auto (specviz.core.auto_k); the adaptive rule, when on, takes its place
        True, drafter_only=True, widget="toggle", section="drafter", label="k: auto (from this machine's costs)", carry="fork",
        help="Choose each round's k (a tree's node budget) before the round, from this machine's cost profile and this run's "
        "acceptance by position: 0, a plain pass, when no k pays. Off: the slider's k every round (or the adaptive rule).",
        flags=("--fixed-k",), negated=True, flag_help="draft the same k every round (or follow --adaptive-k) instead of k: auto",
    )  # fmt: skip
    adaptive_k: bool = setting(
        False, drafter_only=True, widget="toggle", section="drafter", label="adaptive k", carry="fork",
        help="Grow k by 2 after a round where every draft was kept, shrink by 1 after a rejection (in place of k: auto).",
        flags=("--adaptive-k",), flag_help="grow k after fully accepted rounds, shrink after rejections",
    )  # fmt: skip
    max_draft_tokens: int = setting(  # adaptive and auto k's ceiling; a shared server's policy lowers it to the owner's k cap (quietly)
        MAX_DRAFT_TOKENS, low=1, high=MAX_DRAFT_TOKENS, what="The ceiling for adaptive and auto k", drafter_only=True, cap="max_draft_tokens",
    )  # fmt: skip
    tree_width: int = setting(  # children per node of a token tree (n-gram, model, early-exit drafters); 1 = a chain, k = node budget
        START.tree_width, low=1, high=MAX_TREE_WIDTH, message="The tree width must be between {low} (a chain) and {high}; got {value}.", drafter_only=True,
        widget="slider", section="drafter", label="tree width: children per node (1 = a chain)", seeded=True, carry="fork",
        help=f"Draft a token tree of at most k nodes ({', '.join(map(short_name, TREE_KINDS))}) and verify every node in one pass.",
        flags=("--tree-width",), flag_help="children per node of a token tree (1 = a chain; k is then the node budget)",
    )  # fmt: skip
    temperature: float = setting(  # 0 = greedy
        0.0, low=0.0, high=2.0, what="Temperature", widget="slider", section="sampling", step=0.05, label="temperature (0 = greedy)",
        seeded=True, carry="link", flags=("--temperature",), flag_help="0 = greedy",
    )  # fmt: skip
    top_k: int = setting(  # 0 = off; SamplingConfig checks it
        0, widget="number", section="sampling", ui_low=0, ui_high=100_000, label="top-k (0 = off)", carry="link", flags=("--top-k",),
    )  # fmt: skip
    top_p: float = setting(  # 1 = off; SamplingConfig checks it
        1.0, widget="slider", section="sampling", ui_low=0.05, ui_high=1.0, step=0.05, label="top-p (1 = off)", carry="link", flags=("--top-p",),
    )  # fmt: skip
    seed: int = setting(
        0, low=0, message="The seed must be >= {low}; got {value}.", widget="number", section="sampling", ui_high=2**31 - 1, label="seed",
        seeded=True, carry="link", flags=("--seed",),
    )  # fmt: skip
    max_new_tokens: int = setting(
        64, low=1, high=MAX_NEW_TOKENS, what="max new tokens", widget="number", section="sampling", label="max new tokens", seeded=True,
        carry="link", flags=("--max-new-tokens",),
        cap="max_new_tokens", cap_message="max new tokens is limited to {limit} on this server (asked for {value}).", short="max new tokens",
    )  # fmt: skip
    chat: bool = setting(  # wrap the prompt in the tokenizer's chat template
        True, widget="toggle", section="models", label="chat template", help="Wrap the prompt as a user turn; off feeds it raw.", seeded=True,
        carry="fork", flags=("--no-chat",), negated=True, flag_help="feed the prompt raw, without the chat template",
    )  # fmt: skip
    device: str = setting("auto", widget="select", section="models", menu=DEVICES, label="Device", flags=("--device",))
    dtype: str = setting("auto", widget="select", section="models", menu=DTYPES, label="dtype", flags=("--dtype",), flag_help=DTYPE_HELP)
    trust_remote_code: bool = setting(
        False, widget="checkbox", section="models", label="trust remote code", seeded=True,
        help="Runs code shipped in a model repository. Only for repositories you trust.",
        flags=("--trust-remote-code",), flag_help="run code shipped in a model repository (only if you trust it)",
    )  # fmt: skip
    allow_download: bool = setting(
        False, widget="checkbox", section="models", label="allow downloads from the hub", seeded=True,
        help="Off: hub ids load only from the local cache, so an offline machine fails at once.",
        flags=("--allow-download",), flag_help="let hub ids download (off by default: offline)",
    )  # fmt: skip
    allow_pickle: bool = setting(  # local .bin/.pt checkpoints can run code when unpickled: opt-in only
        False, widget="checkbox", section="models", label="allow pickle checkpoints", seeded=True,
        help="Loads .bin/.pt weights, which can run code when unpickled. Only for files you trust; safetensors and GGUF need no opt-in.",
        flags=("--allow-pickle",), flag_help="load .bin/.pt checkpoints, which can run code (only if you trust them)",
    )  # fmt: skip

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
