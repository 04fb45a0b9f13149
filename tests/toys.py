"""The toy target and draft models every plain-torch test uses, and the one plain-greedy reference.

Each toy is a CachedLM (specviz.core.protocols) whose logits after a sequence come from ``logits_after(seq)``,
computed from scratch; extend() feeds ids through it one at a time, so a cache holding the wrong tokens or the
wrong length changes what comes out. ``plain_greedy(lm, ...)`` is argmax of logits_after at every step, no cache
involved: what every greedy exactness test compares against. ``pooled_pvalue`` is the one chi-square test of every
distribution test (the rule's, the trees', the batch's, each drafter's, each precision's, on CUDA too), and
``first_two_tokens`` the one sampler the distribution tests of the drafters share. ``verify`` (the rule read back to
the host in one call, as a ``Verdict``) and ``sample`` (one draw as a host int) are the tests' conveniences over
specviz.core.verify.decide and specviz.core.sampling.draw; the engine never reads a round back token by token.
``zero_uniforms`` makes every uniform the rules draw 0, the one draw no sampling test reaches.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from scipy.stats import chisquare

from specviz.core.sampling import draw
from specviz.core.tree import ancestors
from specviz.core.verify import DraftFate, EmitFate, decide, draft_fates, next_fate

TABLE_V = 10  # TableLM's default vocabulary


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """Draw one token id from a (V,) distribution; returns a host int (one device round trip)."""
    return int(draw(probs, generator).item())


def zero_uniforms(monkeypatch) -> None:
    """Every uniform the rules draw (torch.rand) is 0 for the rest of the test: the one draw where keeping x on
    u < min(1, p/q) and on u <= min(1, p/q) differ, at p(x) = 0. No sampling test can reach it; a stub can."""
    monkeypatch.setattr(torch, "rand", lambda *size, **kw: torch.zeros(*size, device=kw.get("device")))


@dataclass(frozen=True)
class Verdict:
    """What the rule decided for one round (all on the CPU)."""

    num_accepted: int
    uniforms: torch.Tensor  # (k,) one draw per drafted token, kept even when unused
    accept_prob: torch.Tensor  # (k,) min(1, p_target(x_i) / q_draft(x_i))
    next_token: int  # the resampled token, the bonus token, or the plain target sample
    next_fate: EmitFate
    residual: torch.Tensor | None  # (V,) normalised max(0, p - q) at the rejection, else None

    @property
    def draft_fates(self) -> tuple[DraftFate, ...]:
        return draft_fates(self.uniforms.numel(), self.num_accepted)


def verify(p_target: torch.Tensor, q_draft: torch.Tensor, drafted: torch.Tensor, generator: torch.Generator) -> Verdict:
    """p_target (k+1, V), q_draft (k, V), drafted (k,) -> Verdict on the host: decide() plus one transfer."""
    k = drafted.numel()
    decision = decide(p_target, q_draft, drafted, generator)
    n, token = decision.outcome().tolist()
    return Verdict(
        n, decision.uniforms.cpu(), decision.accept_prob.cpu(), token, next_fate(k, n), decision.next_dist.cpu() if n < k else None
    )


class ToyLM:
    """The cache, the protocol's declarations and extend(); subclasses say what follows a sequence."""

    can_verify_tree = False

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device("cpu")
        self._tokens: list[int] = []
        self.extend_calls = 0

    @property
    def tokens(self) -> Sequence[int]:
        return self._tokens

    def logits_after(self, seq: Sequence[int]) -> torch.Tensor:
        """(V,) logits for the token after seq."""
        raise NotImplementedError

    def extend(self, ids: Sequence[int], last_only: bool = False) -> torch.Tensor:
        if len(ids) == 0:
            raise ValueError("extend() needs at least one token")
        self.extend_calls += 1
        rows = []
        for tok in ids:
            self._tokens.append(int(tok))
            rows.append(self.logits_after(self._tokens))
        return torch.stack(rows)  # (len(ids), V)

    def crop(self, length: int) -> None:
        del self._tokens[length:]


class TableLM(ToyLM):
    """Logits at a position depend on the token there, the one before it, and the position itself."""

    def __init__(self, seed: int, vocab_size: int = TABLE_V, noise: float = 0.0, scale: float = 1.0) -> None:
        super().__init__(vocab_size)
        g = torch.Generator().manual_seed(seed)
        self.cur = torch.randn(vocab_size, vocab_size, generator=g) * 2.5  # (token, V)
        self.prev = torch.randn(vocab_size, vocab_size, generator=g)  # (previous token, V)
        self.pos = torch.randn(5, vocab_size, generator=g)  # (position % 5, V)
        if noise:  # a draft that agrees with its target only partly
            gn = torch.Generator().manual_seed(99)
            self.cur = self.cur + noise * torch.randn(vocab_size, vocab_size, generator=gn)
        self.scale = scale  # < 1 flattens every distribution

    def logits_after(self, seq: Sequence[int]) -> torch.Tensor:
        i = len(seq) - 1
        return (self.cur[seq[i]] + self.prev[seq[i - 1] if i > 0 else 0] + self.pos[i % 5]) * self.scale


class TreeTableLM(TableLM):
    """The TableLM target that also scores a token tree in one call: each node from its own path."""

    can_verify_tree = True
    tree_problem = None

    def extend_tree(self, ids: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        self.extend_calls += 1
        base = list(self._tokens)
        rows = [self.logits_after(base + [ids[j] for j in ancestors(parents, i)]) for i in range(len(ids))]
        self._tokens.extend(int(t) for t in ids)
        self._tree = (len(base), list(ids))
        return torch.stack(rows)

    def keep_path(self, path: Sequence[int]) -> None:
        start, ids = self._tree
        del self._tokens[start:]
        self._tokens.extend(ids[i] for i in path)


class BigramLM(ToyLM):
    """Logits depend on the last token only: a fixed random (V, V) table, row = the previous token."""

    def __init__(self, seed: int = 0, vocab_size: int = TABLE_V, sharpness: float = 2.0) -> None:
        super().__init__(vocab_size)
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(vocab_size, vocab_size, generator=g) * sharpness  # (V, V)

    def logits_after(self, seq: Sequence[int]) -> torch.Tensor:
        return self.table[seq[-1]]


@functools.cache
def pair_table(vocab_size: int, seed: int, sharpness: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(vocab_size, vocab_size, vocab_size, generator=g) * sharpness  # (prev, cur, V)


class PairTableLM(ToyLM):
    """Logits are a fixed table of the last two tokens (the one before the first is 0)."""

    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        super().__init__(vocab_size)
        self.table = pair_table(vocab_size, seed)  # (prev, cur, V)

    def next_logits(self, prev: int, cur: int) -> torch.Tensor:
        return self.table[prev, cur]

    def logits_after(self, seq: Sequence[int]) -> torch.Tensor:
        return self.next_logits(seq[-2] if len(seq) > 1 else 0, seq[-1])


class RepeatLM(ToyLM):
    """Always predicts (next id) = (last id + 1) mod V, sharply: every round emits tokens."""

    def logits_after(self, seq: Sequence[int]) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.tensor((seq[-1] + 1) % self.vocab_size), self.vocab_size).float() * 20.0


def plain_greedy(lm: ToyLM, prompt: Sequence[int], max_new: int, eos: tuple[int, ...] = ()) -> list[int]:
    """The reference: argmax from scratch at every step, no caches involved."""
    out = list(prompt)
    for _ in range(max_new):
        out.append(int(lm.logits_after(out).argmax()))
        if out[-1] in eos:
            break
    return out[len(prompt) :]


class BatchedToyLM:
    """B toy rows (one ToyLM each) behind specviz.core.batch.BatchedLM: each row's logits come from its own tokens,
    so a row whose cache holds the wrong tokens or length gives other logits."""

    def __init__(self, rows: Sequence[ToyLM]) -> None:
        self.rows = list(rows)
        self.vocab_size = self.rows[0].vocab_size
        self.device = torch.device("cpu")
        self.extend_calls = 0

    @property
    def lengths(self) -> list[int]:
        return [len(row.tokens) for row in self.rows]

    def extend(self, feeds: Sequence[Sequence[int]], keep_last: int = 0) -> torch.Tensor:
        self.extend_calls += 1
        width = max(len(f) for f in feeds)
        out = torch.zeros(len(feeds), width, self.vocab_size)  # (B, T, V), right-aligned
        for i, (row, fed) in enumerate(zip(self.rows, feeds)):
            if fed:
                out[i, width - len(fed) :] = row.extend(fed)
        return out[:, -keep_last:] if keep_last else out

    def keep(self, lengths: Sequence[int]) -> None:
        for row, n in zip(self.rows, lengths):
            row.crop(n)

    def select(self, rows: Sequence[int]) -> None:
        self.rows = [self.rows[i] for i in rows]


class SharedLengthToyLM(BatchedToyLM):
    """Known-bad: one cache length for every row (the longest), as a batch with one shared cache position would
    keep; a row that accepted fewer drafts than another keeps rejected drafts in its context."""

    def keep(self, lengths: Sequence[int]) -> None:
        super().keep([max(lengths)] * len(lengths))


def fake_clock(decoder, ms_per_read: float):
    """Every clock read of this decoder advances ms_per_read: a round (four reads) takes 3 * ms_per_read, whatever
    it did, so timings, and the speedups made of them, are the same on any machine."""
    ticks = itertools.count()
    decoder._clock = lambda: next(ticks) * ms_per_read / 1000.0
    return decoder


def pooled_pvalue(counts: torch.Tensor, expected: torch.Tensor) -> float:
    """The chi-square p-value of every distribution test: counts (any shape) against the distribution ``expected``
    (the same shape, rescaled to the counts' total n). 0.0 when anything landed where expected is 0; the cells
    expected fewer than 5 times are pooled into one, so the chi-square approximation holds."""
    counts, expected = counts.flatten().double(), expected.flatten().double()
    if counts[expected == 0].sum() > 0:
        return 0.0
    n = float(counts.sum())
    big, small = expected * n >= 5, (expected > 0) & (expected * n < 5)
    observed = counts[big].tolist() + ([float(counts[small].sum())] if small.any() else [])
    wanted = (expected[big] * n).tolist() + ([float(expected[small].sum()) * n] if small.any() else [])
    assert len(wanted) >= 2, "too few samples for a chi-square test: every cell pooled into one"
    return float(chisquare(observed, [w * n / sum(wanted) for w in wanted]).pvalue)


@dataclass(frozen=True)
class FirstTwo:
    """p-values of the first emitted token and of the first two against the target's own distributions, and how often
    the first round's rule took each path."""

    p_one: float
    p_two: float
    accepted: int  # first rounds that kept at least one draft
    rejected: int  # first rounds with a rejection (the resample path)


def first_two_tokens(target: ToyLM, prompt: Sequence[int], temperature: float, n: int, run: Callable[[int], object]) -> FirstTwo:
    """run(seed) -> a finished decoder (SpeculativeDecoder) of at least two new tokens, for seeds 0..n-1; its first two
    tokens are compared with the target's warped first-token and first-two-token distributions after ``prompt``."""
    from specviz.core.sampling import SamplingConfig, warp

    sampling = SamplingConfig(temperature=temperature)
    vocab = target.vocab_size
    first = warp(target.logits_after(list(prompt)), sampling)  # (V,)
    joint = torch.stack([first[a] * warp(target.logits_after(list(prompt) + [a]), sampling) for a in range(vocab)])  # (V, V)
    ones, pairs = torch.zeros(vocab), torch.zeros(vocab, vocab)
    accepted = rejected = 0
    for seed in range(n):
        dec = run(seed)
        a, b = dec.generated[:2]
        ones[a] += 1
        pairs[a, b] += 1
        accepted += dec.records[0].num_accepted > 0
        rejected += "rejected" in dec.records[0].draft_fates
    return FirstTwo(pooled_pvalue(ones, first), pooled_pvalue(pairs, joint), accepted, rejected)


# --- exactness checks the drafters' tests share (a real decoder on a tiny model, built by specviz.runs) ---------------


def greedy_equals_plain(config, target, prompts: Sequence[Sequence[int]], width: int, check: Callable[[object], None] | None = None) -> tuple[int, int]:
    """Greedy speculative decoding of every prompt equals plain greedy decoding, token for token, and drafts trees
    exactly when width > 1; check(decoder) looks at each run too. Returns (accepted, rejected) drafts over all of
    them, so a test can say both branches of the rule were taken."""
    from specviz.runs import RunModels, build_decoder

    accepted = rejected = 0
    for i, ids in enumerate(prompts):
        spec = build_decoder(config, RunModels(target), list(ids))
        spec.run()
        plain = build_decoder(config, RunModels(target), list(ids), baseline=True)
        plain.run()
        assert spec.generated == plain.generated, f"prompt {i}"
        assert spec.use_tree == (width > 1)
        accepted += sum(r.num_accepted for r in spec.records)
        rejected += sum(r.num_drafted - r.num_accepted for r in spec.records)
        if check is not None:
            check(spec)
    return accepted, rejected


def assert_first_two(result: FirstTwo, exact: bool) -> None:
    """An exact rule passes the chi-square of the first and first-two tokens with both branches taken; a known-bad
    variant fails it."""
    if exact:
        assert result.p_one > 1e-3 and result.p_two > 1e-3
        assert result.accepted > 0 and result.rejected > 0
    else:
        assert min(result.p_one, result.p_two) < 1e-6


def paused_and_resumed(config, target, ids: Sequence[int], steps: int = 2):
    """(the run stepped `steps` rounds, its saved state as a JSON round trip, the run resumed from it: not yet run
    on). The resumed run must go on exactly as one run would (assert_same_run)."""
    import json

    from specviz.core.resume import RunState
    from specviz.runs import RunModels, SavedDecoder, build_decoder, resume_decoder

    dec = build_decoder(config, RunModels(target), list(ids))
    for _ in range(steps):
        dec.step()
    state = RunState.from_dict(json.loads(json.dumps(dec.state().to_dict())), len(dec.records))
    return dec, state, resume_decoder(config, RunModels(target), list(ids), SavedDecoder(list(dec.generated), list(dec.records), state, config.seed))


def assert_same_run(resumed, config, target, ids: Sequence[int]) -> None:
    """The resumed run, run to its end, equals one uninterrupted run: its tokens and every round's drafts."""
    from specviz.runs import RunModels, build_decoder

    solo = build_decoder(config, RunModels(target), list(ids))
    solo.run()
    resumed.run()
    assert resumed.generated == solo.generated
    assert [r.drafted for r in resumed.records] == [r.drafted for r in solo.records]
