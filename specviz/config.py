"""RunConfig: everything a run needs, validated in one place. Imports neither streamlit nor transformers."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from specviz.core.decoding import MAX_DRAFT_TOKENS, DecodeConfig
from specviz.core.sampling import SamplingConfig
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import DRAFTER_KINDS, drafter_spec

__all__ = ["DRAFTER_KINDS", "EMBEDDED_TARGET", "MAX_NEW_TOKENS", "MAX_PROMPT_CHARS", "MAX_PROMPT_TOKENS", "DrafterKind", "RunConfig", "validate_prompt"]

DrafterKind = Literal["model", "lookup", "ngram", "early-exit", "medusa", "eagle", "recycle", "none"]  # the kinds of specviz.drafters.specs.DRAFTERS
EMBEDDED_TARGET = "embedded:SmolLM2-135M-Instruct"  # same string as specviz.models.EMBEDDED_TARGET
MAX_PROMPT_CHARS = 20_000  # a cheap check before the tokenizer sees the text (a character is at most 4 byte-level tokens)
MAX_PROMPT_TOKENS = 131_072  # the engine's own ceiling on a prompt's tokens; the model's context usually bites first
MAX_NEW_TOKENS = 2048
MAX_PATH_CHARS = 1_000  # a folder path typed or read from a file
MAX_DRAFT_VOCAB = 1_000_000  # V' of a draft vocabulary; the target's vocabulary is the real limit (checked at load)
DRAFT_VOCAB_CHOICES = (0, 4096, 8192, 16384)  # the menu's V' (0: the full vocabulary); the model cards report these


@dataclass(frozen=True)
class RunConfig:
    target: str = EMBEDDED_TARGET  # hub id, local folder, .gguf file, or the embedded SmolLM2
    draft: str | None = None  # only for drafter="model"
    drafter: DrafterKind = "ngram"  # the offline default: no second model, a real q, fastest measured (scripts/compare_drafters.py)
    exit_layer: int | None = None  # early exit: blocks of the target the draft runs; None picks ~93% of the depth
    medusa_heads: str | None = None  # Medusa: a heads folder (Medusa's layout); None = the heads shipped for the embedded target
    eagle_head: str | None = None  # EAGLE: a head folder (specviz.models.eagle); None = the head shipped for the embedded target
    draft_vocab: int = 0  # Medusa and EAGLE: score only the V' tokens the target says most often (0: the full vocabulary)
    ngram_max: int = 3  # prompt lookup and n-gram drafter: longest n-gram tried first
    ngram_min: int = 1  # ... down to this one
    ngram_threshold: float = 0.5  # n-gram drafter: stop drafting when its count-aware confidence falls below this
    num_draft_tokens: int = 8  # k: a cap; the n-gram drafter stops earlier when its evidence runs out (scripts/vs_transformers.py)
    adaptive_k: bool = False
    max_draft_tokens: int = MAX_DRAFT_TOKENS  # adaptive k's ceiling; a shared server's policy lowers it to the owner's k cap
    tree_width: int = 1  # children per node of a token tree (n-gram, model, early-exit drafters); 1 = a chain, k = node budget
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 64
    chat: bool = True  # wrap the prompt in the tokenizer's chat template
    device: str = "auto"
    dtype: str = "auto"
    trust_remote_code: bool = False
    allow_download: bool = False
    allow_pickle: bool = False  # local .bin/.pt checkpoints can run code when unpickled: opt-in only

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        spec = drafter_spec(self.drafter)  # ValueError for an unknown kind
        if spec.needs_model and not (self.draft or "").strip():
            raise ValueError("The 'model' drafter needs a draft model: give a hub id or a local folder.")
        if not (1 <= self.ngram_min <= self.ngram_max <= 16):
            raise ValueError(f"Need 1 <= ngram_min <= ngram_max <= 16; got {self.ngram_min} and {self.ngram_max}.")
        if not (0.0 <= self.ngram_threshold <= 1.0):
            raise ValueError(f"The n-gram threshold is a probability between 0 and 1; got {self.ngram_threshold}.")
        if not spec.baseline and not (1 <= self.num_draft_tokens <= MAX_DRAFT_TOKENS):
            raise ValueError(f"Number of draft tokens k must be between 1 and {MAX_DRAFT_TOKENS}; got {self.num_draft_tokens}.")
        if not (1 <= self.max_draft_tokens <= MAX_DRAFT_TOKENS):
            raise ValueError(f"The ceiling for adaptive k must be between 1 and {MAX_DRAFT_TOKENS}; got {self.max_draft_tokens}.")
        if self.adaptive_k and not spec.baseline and self.num_draft_tokens > self.max_draft_tokens:
            raise ValueError(f"k ({self.num_draft_tokens}) is above the ceiling for adaptive k ({self.max_draft_tokens}); lower k.")
        if not (1 <= self.tree_width <= MAX_TREE_WIDTH):
            raise ValueError(f"The tree width must be between 1 (a chain) and {MAX_TREE_WIDTH}; got {self.tree_width}.")
        if self.medusa_heads is not None:
            validate_path(self.medusa_heads, "The Medusa heads folder")
        if self.eagle_head is not None:
            validate_path(self.eagle_head, "The EAGLE head folder")
        if not (0 <= self.draft_vocab <= MAX_DRAFT_VOCAB):
            raise ValueError(f"The draft vocabulary is 0 (the full vocabulary) or up to {MAX_DRAFT_VOCAB:,} tokens; got {self.draft_vocab}.")
        if self.exit_layer is not None and self.exit_layer < 1:
            raise ValueError(f"The exit layer must be at least 1; got {self.exit_layer}.")
        if not (1 <= self.max_new_tokens <= MAX_NEW_TOKENS):
            raise ValueError(f"max new tokens must be between 1 and {MAX_NEW_TOKENS}; got {self.max_new_tokens}.")
        if self.temperature > 2.0:
            raise ValueError(f"Temperature must be between 0 and 2; got {self.temperature}.")
        _ = self.sampling  # temperature, top-k, top-p checks live in SamplingConfig
        if self.seed < 0:
            raise ValueError(f"The seed must be >= 0; got {self.seed}.")

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
            adaptive_k=self.adaptive_k,
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
