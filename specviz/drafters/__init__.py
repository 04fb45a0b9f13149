"""Drafters behind one protocol: a draft model, prompt lookup, a context n-gram model, early exit (a draft
model made of the target's first layers, built in specviz.models), Medusa heads on the target's hidden state."""

from specviz.drafters.base import Draft, Drafter, NoDrafter
from specviz.drafters.lookup import PromptLookupDrafter, lookup_continuation
from specviz.drafters.medusa import MedusaDrafter
from specviz.drafters.model import ModelDrafter
from specviz.drafters.ngram import NGramDrafter

__all__ = ["Draft", "Drafter", "MedusaDrafter", "ModelDrafter", "NGramDrafter", "NoDrafter", "PromptLookupDrafter", "lookup_continuation"]
