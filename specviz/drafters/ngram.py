"""A context n-gram language model as drafter: counts of what followed each n-gram in the prompt
and in everything committed so far, with a real q_draft over the whole vocabulary.

Model. For orders n_min..n_max the drafter keeps ``counts[context tuple] -> Counter(next token)``,
updated only for newly committed tokens (drafts never enter the counts, so rollback is free).
To draft after a suffix it backs off from the longest order to the shortest and uses the first
order n whose context has been seen. There q_draft is add-lambda smoothing over the *observed*
followers only:

    q_draft(v) = (c(v) + lambda) / (N + lambda * S)   for the S distinct followers v, N = sum of counts
    q_draft(v) = 0                                     for every other token

so q sums to 1 and is zero outside the support (lambda > 0 only pulls rare followers up).

Confidence grows with the counts. q's top mass is 1 after a single observation, which is no
evidence at all in fresh prose (" the" followed once by " sea" says little about the next " the").
So the decision to draft uses a separate, count-aware estimate of how likely the top follower is
to be right: a prior mass ``prior`` on "something not seen yet", discounted by ``backoff`` for each
order below n_max that the match had to back off to:

    confidence = c(top) / (N + prior) * backoff ** (n_max - n)

With the defaults (n_max 3, prior 0.5, backoff 0.8, threshold 0.5): a trigram seen once drafts
(0.67: in a passage being copied every long context is seen exactly once, and that is strong
evidence), a bigram seen once just does (0.53), a unigram seen once does not (0.43) and needs two
agreeing observations (0.51). Fresh prose matches mostly unigrams, so it mostly does not draft.

Drafting rule (the choice that keeps the verify rule exact). In ``"sample"`` mode (the default)
each token is *sampled* from q_draft with the run's generator, at every temperature, and the q it
was sampled from is reported; Leviathan's rule is then exact for any target warp, and at
temperature 0 (one-hot p_target) it keeps x exactly when x is the target's argmax and otherwise
emits the argmax: plain greedy output, token for token. ``"greedy"`` mode drafts the argmax of
q_draft and, to stay exact, reports q = one-hot on it (reporting the soft q for a greedy draft
would be the classic 'greedy draft scored with soft q' bug). Measured on the prompt set, greedy
drafting made no difference at temperature 0, so the default samples and every chart gets a real q.

Drafting stops after k tokens, when no order matches the suffix, or when the confidence falls below
``threshold``. Stopping depends only on the drafted prefix and the counts, never on the target, so
exactness holds for every stop. Cost per drafted token: at most n_max dict lookups plus one pass
over the (few) followers; the dense (m, V) q_draft is built once per round.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import torch

from specviz.core.protocols import Draft
from specviz.core.tree import TreeDraft
from specviz.drafters.tree import level_sizes, spine_tree

NGramMode = Literal["sample", "greedy"]
DEFAULT_THRESHOLD = 0.5  # stop drafting when the confidence is below this
DEFAULT_PRIOR = 0.5  # pseudo-count of "a follower not seen yet": one observation gives confidence 1 / 1.5
DEFAULT_BACKOFF = 0.8  # confidence factor per order backed off below n_max


class NGramCounts:
    """Follower counts for orders n_min..n_max over one growing token stream."""

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min = n_min
        self.n_max = n_max
        self.followers: dict[tuple[int, ...], Counter[int]] = {}
        self.tokens: list[int] = []  # every token counted so far, in order

    def extend(self, ids: Sequence[int]) -> None:
        """Append tokens and count each as a follower of the n_min..n_max tokens before it."""
        toks = self.tokens
        for tok in ids:
            t = len(toks)
            for n in range(self.n_min, min(self.n_max, t) + 1):
                ctx = tuple(toks[t - n : t])
                counter = self.followers.get(ctx)
                if counter is None:
                    counter = self.followers[ctx] = Counter()
                counter[tok] += 1
            toks.append(tok)

    def match(self, suffix: Sequence[int]) -> tuple[int, Counter[int]] | None:
        """(order n, followers) at the longest order whose context (the suffix's last n tokens) was seen; None on a miss."""
        for n in range(min(self.n_max, len(suffix)), self.n_min - 1, -1):
            counter = self.followers.get(tuple(suffix[len(suffix) - n :]))
            if counter:
                return n, counter
        return None

    def lookup(self, suffix: Sequence[int]) -> Counter[int] | None:
        """Followers at the longest order that matches; None on a miss."""
        found = self.match(suffix)
        return found[1] if found else None


def smoothed(counter: Counter[int], smoothing: float) -> tuple[list[int], list[float]]:
    """Add-lambda over the observed followers: (ids, probabilities summing to 1), most likely first."""
    items = counter.most_common()  # ties keep first-seen order, so the result is deterministic
    total = sum(c for _, c in items) + smoothing * len(items)
    return [tok for tok, _ in items], [(c + smoothing) / total for _, c in items]


def confidence(counter: Counter[int], order: int, n_max: int, prior: float = DEFAULT_PRIOR, backoff: float = DEFAULT_BACKOFF) -> float:
    """How likely the top follower is right, from the counts alone: c(top) / (N + prior), times backoff per order below n_max."""
    top = max(counter.values())
    return top / (sum(counter.values()) + prior) * backoff ** (n_max - order)


class NGramDrafter:
    """Drafts from an n-gram model of the context itself; q_draft is a real, sparse distribution."""

    has_q = True
    can_branch = True
    reads_hidden = False
    reads_features = False
    reads_logits = False
    keeps_state = False
    device = torch.device("cpu")

    def __init__(
        self,
        vocab_size: int,
        n_max: int = 3,
        n_min: int = 1,
        threshold: float = DEFAULT_THRESHOLD,
        smoothing: float = 0.5,
        mode: NGramMode = "sample",
        prior: float = DEFAULT_PRIOR,
        backoff: float = DEFAULT_BACKOFF,
    ) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be at least 1; got {vocab_size}.")
        if not (1 <= n_min <= n_max):
            raise ValueError(f"need 1 <= n_min <= n_max; got n_min={n_min}, n_max={n_max}.")
        if not (0.0 <= threshold <= 1.0):
            raise ValueError(f"the n-gram threshold is a probability in [0, 1]; got {threshold}.")
        if smoothing < 0.0:
            raise ValueError(f"smoothing (lambda) must be >= 0; got {smoothing}.")
        if prior < 0.0:
            raise ValueError(f"the confidence prior must be >= 0; got {prior}.")
        if not (0.0 < backoff <= 1.0):
            raise ValueError(f"the backoff factor must be in (0, 1]; got {backoff}.")
        if mode not in ("sample", "greedy"):
            raise ValueError(f"mode must be 'sample' or 'greedy'; got {mode!r}.")
        self.vocab_size = vocab_size
        self.n_min, self.n_max = n_min, n_max
        self.threshold = threshold
        self.smoothing = smoothing
        self.mode: NGramMode = mode
        self.prior, self.backoff = prior, backoff
        self.name = f"n-gram ({n_min}..{n_max})" if mode == "sample" else f"n-gram greedy ({n_min}..{n_max})"
        self.counts = NGramCounts(n_min, n_max)

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        self.counts = NGramCounts(self.n_min, self.n_max)
        self.counts.extend(prompt_ids)

    def _catch_up(self, committed: Sequence[int]) -> None:
        """Count the committed tokens not counted yet; start over if committed is not a continuation."""
        seen = self.counts.tokens
        if len(committed) < len(seen) or (seen and committed[len(seen) - 1] != seen[-1]):
            self.prepare(committed)  # a different stream (cheap check: length and last counted token)
        elif len(committed) > len(seen):
            self.counts.extend(committed[len(seen) :])

    def followers(self, suffix: Sequence[int]) -> Counter[int] | None:
        """What followed the suffix at the longest matching order, or None where drafting stops: no order
        matches (nothing to say), or the confidence is below the threshold (too little evidence to spend
        verify compute on). The one stopping rule of the chain and the tree (specviz.drafters.tree)."""
        found = self.counts.match(suffix)
        if found is None:
            return None
        order, counter = found
        if confidence(counter, order, self.n_max, self.prior, self.backoff) < self.threshold:
            return None
        return counter

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        if k <= 0:
            return Draft(())
        self._catch_up(context)
        suffix = list(context[max(0, len(context) - self.n_max) :])  # only the tail is ever looked up
        draws = torch.rand(k, generator=generator).tolist()  # one uniform per possible draft, read once per round
        ids: list[int] = []
        support: list[tuple[list[int], list[float]]] = []  # per drafted token: (ids, probabilities)
        for _ in range(k):
            counter = self.followers(suffix)
            if counter is None:
                break
            tokens, probs = smoothed(counter, self.smoothing)
            if self.mode == "greedy":
                tok = tokens[0]
                tokens, probs = [tok], [1.0]  # the draft's actual (deterministic) sampling distribution
            else:
                tok = tokens[_draw(probs, draws[len(ids)])]
            ids.append(tok)
            support.append((tokens, probs))
            suffix.append(tok)
            del suffix[: max(0, len(suffix) - self.n_max)]
        if not ids:
            return Draft(())
        rows = [row for row, (tokens, _) in enumerate(support) for _ in tokens]
        cols = [tok for tokens, _ in support for tok in tokens]
        vals = [p for _, probs in support for p in probs]
        q_draft = torch.zeros(len(ids), self.vocab_size)  # (m, V), built once per round
        q_draft.index_put_((torch.tensor(rows), torch.tensor(cols)), torch.tensor(vals))
        return Draft(tuple(ids), q_draft)

    def propose_tree(self, context: Sequence[int], k: int, width: int, generator: torch.Generator) -> TreeDraft:
        """A token tree of at most k nodes (specviz.drafters.tree): the width most frequent followers per level;
        the spine stops where the chain would stop (followers(): no order matches, or too little confidence)."""
        if k <= 0:
            return TreeDraft((), ())
        self.rollback(context)  # count what was committed since the last round
        suffix = list(context[max(0, len(context) - self.n_max) :])
        levels: list[tuple[list[int], torch.Tensor | None]] = []
        for size in level_sizes(k, width):
            counter = self.followers(suffix)  # the chain's stopping rule (NGramDrafter.followers)
            if counter is None:
                break
            tokens, probs = smoothed(counter, self.smoothing)
            q = torch.zeros(self.vocab_size)
            q[tokens] = torch.tensor(probs)
            levels.append((tokens[:size], q))
            suffix.append(tokens[0])
            del suffix[: max(0, len(suffix) - self.n_max)]
        return spine_tree(levels)

    def rollback(self, committed: Sequence[int]) -> None:
        self._catch_up(committed)


def _draw(probs: list[float], u: float) -> int:
    """Index drawn from a short list of probabilities with one uniform u in [0, 1) from the run's generator."""
    cumulative = 0.0
    edges = []
    for p in probs:
        cumulative += p
        edges.append(cumulative)
    return min(bisect.bisect_right(edges, u * cumulative), len(probs) - 1)
