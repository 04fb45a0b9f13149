"""One table of drafters: what each kind is called, what it needs and what it can do, read by the config,
the sidebar, the session, the CLI, the benchmark, the exactness lab and the cost profile.

Capabilities (can it branch into a token tree, does it return a real q_draft) are read off the drafter class,
where they are declared, so the table cannot drift from the code. ``build`` makes the drafter from the run's
settings, the vocabulary and what the drafter drafts with, which the caller resolved (specviz.runs): for the two
kinds that draft with a language model that model (a CachedLM), for Medusa its heads (a HeadsSource), for EAGLE its
layer over the target's features (a FeatureHead), for Token Recycling the device of the target whose passes it reads.

Each drafter's defaults (k, tree width, draft vocabulary) are its measured best on a 2-core CPU: MEASURED_BEST, written
by scripts/drafter_defaults.py from the shipped benchmark tables (docs/benchmarks.md#each-drafters-defaults), never by
hand; the sidebar and the CLI apply them when a drafter is chosen, unless the user set the value. The same script
writes PRIOR_ACCEPTANCE, the acceptance per draft position those runs imply: k: auto's prior (specviz.core.auto_k).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Literal, Protocol

import torch

from specviz.core.protocols import CachedLM, Drafter
from specviz.core.sampling import SamplingConfig
from specviz.drafters.base import NoDrafter
from specviz.drafters.eagle import EagleDrafter, FeatureHead
from specviz.drafters.lookup import PromptLookupDrafter
from specviz.drafters.medusa import HeadsSource, MedusaDrafter
from specviz.drafters.model import ModelDrafter
from specviz.drafters.ngram import NGramDrafter
from specviz.drafters.recycle import RecycleDrafter

# a drafter's model source: what it drafts with beyond the context, named by the specviz.runs.RunModels field that holds
# it (a second model, the target's first layers, Medusa heads on the target, an EAGLE layer over the target's features),
# or "target" (nothing but the target's own passes) or "none" (the context alone)
ModelSource = Literal["none", "target", "draft", "early_exit", "heads", "eagle"]


class DrafterSettings(Protocol):
    """The run settings a drafter is built from (specviz.config.RunConfig has them)."""

    ngram_max: int
    ngram_min: int
    ngram_threshold: float

    @property
    def sampling(self) -> SamplingConfig: ...


DraftSource = CachedLM | HeadsSource | FeatureHead | torch.device | None  # a model drafter's LM, Medusa's heads, EAGLE's
# layer, the target's device (Token Recycling), or nothing
Build = Callable[[DrafterSettings, int, DraftSource, str], Drafter]


@dataclass(frozen=True)
class Tuning:
    """A drafter's default settings; each name is a RunConfig field."""

    num_draft_tokens: int  # k: tokens drafted per round (a tree's node budget)
    tree_width: int = 1  # children per node (1 = a chain)
    draft_vocab: int = 0  # V' of a draft vocabulary (0: the full vocabulary)


TUNED_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Tuning))  # the RunConfig fields a drafter's defaults set
UNMEASURED = Tuning(8)  # a drafter the shipped benchmark has not measured (a second model's cost is the user's own)
UNMEASURED_PRIOR = 0.5  # auto k's prior acceptance per draft position for such a drafter

# BEGIN MEASURED_BEST: written by `python scripts/drafter_defaults.py --write`; tests/test_drafter_defaults.py checks it
MEASURED_BEST: dict[str, Tuning] = {
    "ngram": Tuning(4, 1, 0),  # bench_cpu.csv: worst on open text 0.89x, mean 1.39x
    "lookup": Tuning(8, 1, 0),  # bench_cpu.csv: worst on open text 0.79x, mean 1.41x
    "early-exit": Tuning(4, 1, 0),  # bench_cpu.csv: worst on open text 0.37x, mean 0.40x
    "medusa": Tuning(2, 1, 8192),  # drafting_cpu.json: worst on open text 1.03x, mean 1.16x
    "eagle": Tuning(3, 1, 8192),  # drafting_eagle_cpu.json: worst on open text 0.90x, mean 0.97x
    "recycle": Tuning(4, 1, 0),  # drafting_cpu.json: worst on open text 0.93x, mean 1.06x
}
PRIOR_ACCEPTANCE: dict[str, float] = {  # per draft position, implied by the same runs (auto k's prior)
    "ngram": 0.52,
    "lookup": 0.5,
    "early-exit": 0.48,
    "medusa": 0.37,
    "eagle": 0.35,
    "recycle": 0.23,
}
# END MEASURED_BEST


@dataclass(frozen=True)
class DrafterSpec:
    kind: DrafterKind  # the config's and the CLI's name
    label: str  # the sidebar menu's line
    short_name: str  # in run names, tables and messages
    cls: type  # the drafter class, which declares can_branch and has_q
    build: Build  # (settings, vocab size, what it drafts with or None, display name) -> the drafter
    source: ModelSource = "none"  # what it drafts with (ModelSource): the RunModels field resolve_models loads for it
    baseline: bool = False  # plain decoding: the baseline every speedup divides by

    @property
    def measured(self) -> bool:
        """The shipped benchmark measured this drafter, so its defaults are its measured best."""
        return self.kind in MEASURED_BEST

    @property
    def defaults(self) -> Tuning:
        """k, tree width and draft vocabulary this drafter starts at: its measured best, else UNMEASURED."""
        return MEASURED_BEST.get(self.kind, UNMEASURED)

    @property
    def prior_acceptance(self) -> float:
        """Acceptance per draft position its benchmark runs imply: auto k's prior until a run has evidence."""
        return PRIOR_ACCEPTANCE.get(self.kind, UNMEASURED_PRIOR)

    @property
    def needs_model(self) -> bool:
        """A second model must be loaded (and chosen) for this drafter."""
        return self.source == "draft"

    @property
    def can_branch(self) -> bool:
        return bool(self.cls.can_branch)

    @property
    def has_q(self) -> bool:
        return bool(self.cls.has_q)

    @property
    def reads_hidden(self) -> bool:
        """It drafts from the target's hidden states (the newest row, or every committed row): the run's target view
        keeps them (HFCachedLM keep_hidden)."""
        return bool(self.cls.reads_hidden or self.cls.reads_features)

    @property
    def cuts_vocab(self) -> bool:
        """It scores the target's LM head, so a draft vocabulary (RunConfig.draft_vocab) makes its steps cheaper."""
        return self.source in ("heads", "eagle")


def _model(settings: DrafterSettings, vocab: int, lm: CachedLM | None, name: str) -> Drafter:
    if lm is None:
        raise ValueError(f"The {name} drafter needs its language model.")
    return ModelDrafter(lm, settings.sampling, name=name)  # type: ignore[arg-type]


def _medusa(settings: DrafterSettings, vocab: int, heads: DraftSource, name: str) -> Drafter:
    if not isinstance(heads, HeadsSource):
        raise ValueError(f"The {name} drafter needs its Medusa heads.")
    return MedusaDrafter(heads.head_logits, heads.num_heads, settings.sampling, heads.device, name=name, vocab_ids=heads.vocab_ids, vocab_size=vocab)


def _eagle(settings: DrafterSettings, vocab: int, head: DraftSource, name: str) -> Drafter:
    if not isinstance(head, FeatureHead):
        raise ValueError(f"The {name} drafter needs its EAGLE head.")
    return EagleDrafter(head, settings.sampling, vocab, name=name)


def _recycle(settings: DrafterSettings, vocab: int, device: DraftSource, name: str) -> Drafter:
    return RecycleDrafter(vocab, device if isinstance(device, torch.device) else "cpu", name=name)


DRAFTERS: tuple[DrafterSpec, ...] = (  # the default first (menus start there)
    DrafterSpec(
        "ngram", "context n-gram model (a real q from counts)", "n-gram model", NGramDrafter,
        lambda s, vocab, lm, name: NGramDrafter(vocab, s.ngram_max, s.ngram_min, s.ngram_threshold),
    ),
    DrafterSpec(
        "lookup", "prompt lookup (copies n-grams from the context)", "prompt lookup", PromptLookupDrafter,
        lambda s, vocab, lm, name: PromptLookupDrafter(s.ngram_max, s.ngram_min),
    ),
    DrafterSpec("model", "draft model (a smaller LM)", "draft model", ModelDrafter, _model, source="draft"),
    DrafterSpec("early-exit", "early exit (the target's first L layers)", "early exit", ModelDrafter, _model, source="early_exit"),
    DrafterSpec("medusa", "Medusa heads (the target guesses its own future)", "Medusa heads", MedusaDrafter, _medusa, source="heads"),
    DrafterSpec("eagle", "EAGLE (one layer continues the target's features)", "EAGLE", EagleDrafter, _eagle, source="eagle"),
    DrafterSpec("recycle", "token recycling (the target's own past guesses)", "token recycling", RecycleDrafter, _recycle, source="target"),
    DrafterSpec("none", "none: plain target decoding", "plain decoding", NoDrafter, lambda s, vocab, lm, name: NoDrafter(), baseline=True),
)  # fmt: skip
DRAFTER_KINDS: tuple[str, ...] = tuple(d.kind for d in DRAFTERS)
# A run's drafter: one of DRAFTER_KINDS, checked at run time (drafter_spec, RunConfig.validate). A str, not a Literal:
# a Literal is a second list of the kinds beside this table, and a kind chosen at run time (a menu, a flag, a sweep)
# could only be passed to it with the type checker silenced.
DrafterKind = str
SPECULATIVE_KINDS: tuple[str, ...] = tuple(d.kind for d in DRAFTERS if not d.baseline)  # benchmark sweeps
ONE_MODEL_KINDS: tuple[str, ...] = tuple(d.kind for d in DRAFTERS if not d.baseline and not d.needs_model)  # lab, profile
TREE_KINDS: tuple[str, ...] = tuple(d.kind for d in DRAFTERS if d.can_branch)
_BY_KIND = {d.kind: d for d in DRAFTERS}


def drafter_spec(kind: str) -> DrafterSpec:
    """The spec of a drafter kind; ValueError naming the known kinds otherwise."""
    spec = _BY_KIND.get(kind)
    if spec is None:
        raise ValueError(f"Unknown drafter {kind!r}; choose one of {', '.join(DRAFTER_KINDS)}.")
    return spec


def drafter_label(kind: str) -> str:
    spec = _BY_KIND.get(kind)
    return spec.label if spec else kind


def short_name(kind: str) -> str:
    spec = _BY_KIND.get(kind)
    return spec.short_name if spec else kind


def branches(kind: str, tree_width: int) -> int:
    """The tree width a run of this drafter really drafts with: drafters that cannot branch draft chains."""
    spec = _BY_KIND.get(kind)
    return tree_width if spec is not None and spec.can_branch else 1
