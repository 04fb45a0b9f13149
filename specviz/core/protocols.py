"""What the round needs from a model and from a drafter, with the capabilities declared on the classes.

A target or draft model is a ``CachedLM`` (a KV cache owned by one run); one that can also score a token tree
in one pass is a ``TreeCachedLM`` and says so with ``can_verify_tree = True``. A drafter is a ``Drafter``; one
that can propose token trees is a ``TreeDrafter`` and says so with ``can_branch = True``. ``has_q`` says whether
propose() returns a real q_draft. A drafter that guesses from the target's own hidden state (Medusa heads) says
so with ``reads_hidden = True``: the round hands it, through observe(), the target's last hidden state at the row
whose LM-head output chose the newest committed token, which the target (a ``HiddenStateLM``) kept from the pass
the round already ran. A drafter that runs its own layer over the target's features (EAGLE) says ``reads_features =
True`` and is handed, through observe_features(), the hidden rows that chose *every* newly committed token (the
prefill's too). A drafter that learns from the target's logits (Token Recycling) says ``reads_logits = True`` and is
handed, through observe_logits(), every row of every pass the run makes (the prefill's and each verify pass's,
rejected drafts included), with the token fed at each row. A round's hand-overs reach the drafter at the start of
the next draft phase, so their cost counts as drafting (the prefill's are part of the prefill). A drafter whose per-run state the committed tokens cannot give
back (a table learned from rejected drafts' rows) says ``keeps_state = True`` and saves and loads it as bytes, for a
checkpoint and for a saved run. Nothing in the loop discovers a capability by inspecting signatures.

A long job (a sweep, a lab's measurement) that shares the model with other sessions is handed a ``Turn``: each call
holds the model for one piece of work (``with turn(): one pass``). The measuring code never knows whose queue it is.

A prefill longer than PREFILL_CHUNK_TOKENS runs in chunks (``specviz.models.HFCachedLM``), and between two chunks it
calls ``pause_point()``: inside ``pausable(pause)`` (a model turn on a shared server sets it) that may hand the model to
a participant waiting in the queue and take it back, so no single prefill holds the model longer than a few hundred
tokens' pass. The pause is scoped to the running thread (a ``ContextVar``), never shared between sessions; alone on the
machine there is none, and a pause point costs nothing. ``paused_s()`` is what the turns waited so far, so a prefill's
own clock can leave the waits out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import ClassVar, Protocol, cast

import torch

from specviz.core.tree import TreeDraft

Turn = Callable[[], AbstractContextManager[object]]  # one model turn per call: `with turn(): one run or one pass`
no_turn: Turn = nullcontext  # alone on the machine (the command line, tests): nothing to wait for
Pause = Callable[[], float]  # between two chunks of a long prefill: maybe let a waiting turn go first; seconds waited
PREFILL_CHUNK_TOKENS = 256  # a prefill is fed in passes of at most this many tokens (about a Step's pass or a few)


@dataclass
class _Pauses:
    pause: Pause
    waited_s: float = 0.0


_pauses: ContextVar[_Pauses | None] = ContextVar("specviz_pauses", default=None)


@contextmanager
def pausable(pause: Pause) -> Iterator[None]:
    """Within the block (one model turn), every pause_point() calls pause: a long prefill gives way between chunks."""
    token = _pauses.set(_Pauses(pause))
    try:
        yield
    finally:
        _pauses.reset(token)


def pause_point() -> float:
    """Between two chunks of one long pass: the turn's pause, if this code runs inside pausable(); seconds waited."""
    pauses = _pauses.get()
    if pauses is None:
        return 0.0
    waited = float(pauses.pause())
    pauses.waited_s += waited
    return waited


def paused_s() -> float:
    """Seconds the pauses of the enclosing pausable() block have waited so far (0 outside one)."""
    pauses = _pauses.get()
    return pauses.waited_s if pauses is not None else 0.0


class CachedLM(Protocol):
    """A causal LM with its own KV cache, owned by one run. ``tokens`` are the ids already cached."""

    vocab_size: int
    device: torch.device
    can_verify_tree: ClassVar[bool]  # True: this is a TreeCachedLM

    @property
    def tokens(self) -> Sequence[int]: ...

    def extend(self, ids: Sequence[int] | torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Feed ids after the cached ones; return (len(ids), vocab_size) logits, one row per fed id.
        last_only: only the last row is needed (a long prefill); an implementation may return (1, V) or all rows.
        ids may be a 1-D LongTensor on the device (a draft model feeding back its own samples)."""
        ...

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` cached tokens."""
        ...


class TreeCachedLM(CachedLM, Protocol):
    """A CachedLM that scores a token tree in one pass and compacts its cache to the accepted path."""

    @property
    def tree_problem(self) -> str | None:
        """Why this model cannot verify a tree right now (e.g. its attention ignores a custom mask), or None."""
        ...

    def extend_tree(self, ids: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        """Feed a tree (parents[i] < i, -1 = the cached context) -> (len(ids), V) logits, one row per node."""
        ...

    def keep_path(self, path: Sequence[int]) -> None:
        """After extend_tree(): keep the cached context plus the nodes at ``path`` (root's child first)."""
        ...


class HiddenStateLM(CachedLM, Protocol):
    """A CachedLM that keeps the last hidden state (after the final norm, what the LM head reads) of its latest pass."""

    @property
    def last_hidden(self) -> torch.Tensor | None:
        """(T, H) one row per position of the latest extend()/extend_tree() (a last_only pass's too), on the model's
        device; None when this run keeps no hidden states or nothing was fed yet."""
        ...


@dataclass(frozen=True)
class Draft:
    """Proposed token ids and, when the drafter has one, its distribution at each of them."""

    token_ids: tuple[int, ...]
    q_draft: torch.Tensor | None = None  # (len(token_ids), V) probabilities, any device; None: one-hot on each id
    on_device: torch.Tensor | None = None  # (len(token_ids),) the same ids where they were drawn, when a drafter has them


class Drafter(Protocol):
    """Proposes up to k next tokens for a context; told afterwards what was committed.

    Randomness comes only from the generator handed to propose(), seeded from the run's seed; it lives on the
    drafter's ``device`` (the CPU for host-side drafters), so a draft model samples where it runs. Read tensors
    back to the host at most a constant number of times per call, never per token.
    """

    name: str
    has_q: ClassVar[bool]  # True when propose() returns a real q_draft
    can_branch: ClassVar[bool]  # True: this is a TreeDrafter
    reads_hidden: ClassVar[bool]  # True: this is a HiddenDrafter; the target must be a HiddenStateLM
    reads_features: ClassVar[bool]  # True: this is a FeatureDrafter; the target must be a HiddenStateLM
    reads_logits: ClassVar[bool]  # True: this is a LogitsDrafter
    keeps_state: ClassVar[bool]  # True: this is a StatefulDrafter
    device: torch.device  # where propose() samples

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        """Called once before the first round (e.g. prefill a draft model's cache)."""
        ...

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        """Up to k tokens that may follow context; an empty Draft means 'no guess this round'."""
        ...

    def rollback(self, committed: Sequence[int]) -> None:
        """Forget whatever of the last proposal did not become part of committed."""
        ...


class TreeDrafter(Drafter, Protocol):
    """A Drafter that also proposes token trees of at most k nodes, ``width`` children per node."""

    def propose_tree(self, context: Sequence[int], k: int, width: int, generator: torch.Generator) -> TreeDraft: ...


class HiddenDrafter(Drafter, Protocol):
    """A Drafter that guesses from the target's hidden state (reads_hidden = True)."""

    def observe(self, hidden: torch.Tensor | None) -> None:
        """(H,) the target's last hidden state at the row whose LM-head output chose the newest committed token
        (None: there is none yet, a prompt of one token); called after the prefill and after every verify pass."""
        ...


class FeatureDrafter(Drafter, Protocol):
    """A Drafter that runs its own layer over the target's features (reads_features = True: EAGLE)."""

    def observe_features(self, start: int, features: torch.Tensor, tokens: Sequence[int]) -> None:
        """(r, H) the target's last hidden states at positions start..start+r-1 of the committed text, each the row
        whose LM-head output chose the matching token of ``tokens`` (the token at the next position). Called with
        the prefill's rows (start 0) and, after every round, with the rows that chose the round's committed tokens;
        whatever the drafter holds from position ``start`` on is superseded."""
        ...


class LogitsDrafter(Drafter, Protocol):
    """A Drafter that learns from the target's logits (reads_logits = True: Token Recycling)."""

    def observe_logits(self, ids: Sequence[int], logits: torch.Tensor) -> None:
        """(T, V) raw logits of T rows of a target pass, row i computed after feeding ids[i] (in a tree pass, after
        node i under its ancestors). Called for every row of the prefill (in chunks) and of every verify pass."""
        ...


class StatefulDrafter(Drafter, Protocol):
    """A Drafter with per-run state the committed tokens cannot give back (keeps_state = True)."""

    def save_state(self) -> bytes:
        """Everything the drafter learned so far, compact (a checkpoint, a saved run)."""
        ...

    def load_state(self, data: bytes) -> None:
        """Back to what save_state() returned; ValueError for bytes that are not such a state."""
        ...


@dataclass(frozen=True)
class Readers:
    """A drafter's declared capabilities, each as the protocol it promises; None where it declares none. The round
    asks these once, when the run starts, instead of asking the flags at every call."""

    hidden: HiddenDrafter | None  # reads_hidden
    features: FeatureDrafter | None  # reads_features
    logits: LogitsDrafter | None  # reads_logits
    state: StatefulDrafter | None  # keeps_state


def readers(drafter: Drafter) -> Readers:
    """The drafter as each protocol its flags declare (the flags are the contract: nothing is inspected)."""
    return Readers(
        hidden=cast(HiddenDrafter, drafter) if drafter.reads_hidden else None,
        features=cast(FeatureDrafter, drafter) if drafter.reads_features else None,
        logits=cast(LogitsDrafter, drafter) if drafter.reads_logits else None,
        state=cast(StatefulDrafter, drafter) if drafter.keeps_state else None,
    )


def extend_last(lm: CachedLM, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Feed ids and return the last position's (V,) logits, asking the lm to compute no others."""
    return lm.extend(ids, last_only=True)[-1]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
