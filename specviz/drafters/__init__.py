"""Drafters behind one protocol: a draft model, prompt lookup, a context n-gram model, early exit (a draft
model made of the target's first layers, built in specviz.models), Medusa heads on the target's hidden state, an
EAGLE layer over the target's features, and token recycling (a table of the target's own past guesses)."""

from specviz.drafters.base import Draft, Drafter, NoDrafter
from specviz.drafters.eagle import EagleDrafter
from specviz.drafters.lookup import PromptLookupDrafter, lookup_continuation
from specviz.drafters.medusa import MedusaDrafter
from specviz.drafters.model import ModelDrafter
from specviz.drafters.ngram import NGramDrafter
from specviz.drafters.recycle import RecycleDrafter

__all__ = [
    "Draft", "Drafter", "EagleDrafter", "MedusaDrafter", "ModelDrafter", "NGramDrafter", "NoDrafter", "PromptLookupDrafter",
    "RecycleDrafter", "lookup_continuation",
]  # fmt: skip
