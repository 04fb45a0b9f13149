"""The accept/resample rule of Leviathan et al. (2023) and Chen et al. (2023).

For drafted tokens x_1..x_k: keep x_i with probability min(1, p_target(x_i) / q_draft(x_i));
at the first rejection draw from normalised max(0, p_target - q_draft) and stop; if all k
survive, draw a bonus token from p_target at position k+1. The emitted tokens are then
distributed exactly as if sampled from the target alone. With temperature 0 both
distributions are one-hots, and the same rule reduces to "keep while draft == argmax".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from specviz.core.sampling import draw

DraftFate = Literal["accepted", "rejected", "discarded"]
EmitFate = Literal["accepted", "resampled", "bonus", "target"]


@dataclass(frozen=True)
class Decision:
    """What the rule decided for one round, still on the device: nothing has crossed to the host yet."""

    num_accepted: torch.Tensor  # () long: the leading run of accepted drafts, n
    next_token: torch.Tensor  # () long: the resampled token, the bonus token, or the plain target sample
    uniforms: torch.Tensor  # (k,) one draw per drafted token, kept even when unused
    accept_prob: torch.Tensor  # (k,) min(1, p_target(x_i) / q_draft(x_i))
    next_dist: torch.Tensor  # (V,) what next_token was drawn from: the residual at a rejection, else p_target[k]

    def outcome(self) -> torch.Tensor:
        """(2,) [n, next_token]: the one thing the host needs to commit the round."""
        return torch.stack([self.num_accepted, self.next_token])


def draft_fates(k: int, num_accepted: int) -> tuple[DraftFate, ...]:
    """Accepted up to the first rejection, then rejected, then discarded (never looked at)."""
    n = num_accepted
    return ("accepted",) * n + (("rejected",) if n < k else ()) + ("discarded",) * max(0, k - n - 1)


def next_fate(k: int, num_accepted: int) -> EmitFate:
    """How the round's last token came about: resampled after a rejection, a bonus after k accepts, or plain."""
    return "resampled" if num_accepted < k else ("bonus" if k else "target")


def one_hot_q(drafted: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(k,) ids -> (k, V) one-hot q_draft on the ids' device, for drafters that propose without a distribution."""
    q = torch.zeros(drafted.numel(), vocab_size, device=drafted.device)
    return q.scatter_(1, drafted.view(-1, 1), 1.0)


def residual(p_target: torch.Tensor, q_draft: torch.Tensor) -> torch.Tensor:
    """Normalised max(0, p_target - q_draft) over the last dim. Falls back to p_target if p <= q everywhere.
    The fallback is added, not selected: the diff is all zeros there, and where the mass is positive p_target * 0 adds
    0 (values as torch.where's, bit for bit, without a select over the vocabulary, which costs several arithmetic passes
    on a CPU)."""
    diff = (p_target - q_draft).clamp_min(0.0)
    mass = diff.sum(dim=-1, keepdim=True)
    return diff / mass.clamp_min(1e-30) + p_target * (mass <= 0)


def decide(
    p_target: torch.Tensor,
    q_draft: torch.Tensor,
    drafted: torch.Tensor,
    generator: torch.Generator,
    *,
    greedy: bool = False,
    argmax: torch.Tensor | None = None,
) -> Decision:
    """p_target (k+1, V), q_draft (k, V), drafted (k,) -> Decision, all on one device with a generator there.
    Branch-free, so the host never waits on the device inside the rule.

    greedy: p_target is the temperature-0 warp, one-hot rows. Then the distribution the next token is drawn from
    (p at row n, or the residual max(0, p - q) there, which is zero except at p's argmax, else p itself) is one-hot on
    p's argmax: the argmax *is* the draw, and no random number is spent on it (sampling.draw_draft does the same for
    drafts). The race over the vocabulary a draw takes costs about 2 ms over SmolLM2's 49,152 tokens on one CPU
    thread: more than the rest of the rule. argmax (k+1,): where each one-hot row is hot, when the warp has it
    (sampling.greedy_warp); the next token is then read there instead of ranking row n again."""
    k = drafted.numel()
    if p_target.shape[0] != k + 1 or q_draft.shape[0] != k:
        raise ValueError(f"need p_target of k+1 rows and q_draft of k rows for k={k} drafts")
    if k == 0:  # nothing drafted (plain decoding): a plain target sample; nothing to test, no residual to compute
        n = torch.zeros((), dtype=torch.long, device=p_target.device)
        next_dist, empty = p_target[0], p_target.new_zeros(0)
        if greedy:
            next_token = next_dist.argmax() if argmax is None else argmax[0]
        else:
            next_token = draw(next_dist, generator)
        return Decision(n, next_token, empty, empty, next_dist)
    uniforms = torch.rand(k, generator=generator, device=p_target.device)
    p_x = p_target[:k].gather(1, drafted.view(-1, 1)).view(-1)
    q_x = q_draft.gather(1, drafted.view(-1, 1)).view(-1)
    # q_x == 0 cannot happen for a token drawn from q; treat it as "reject" rather than dividing by zero.
    accept_prob = torch.where(q_x > 0, (p_x / q_x.clamp_min(1e-30)).clamp(max=1.0), torch.zeros_like(p_x))
    accepted = uniforms < accept_prob
    # 1. first rejection, vectorised: count the leading run of accepts
    n = accepted.long().cumprod(dim=0).sum()  # ()
    # 2. rejected at position n: resample from the mass the draft under-weighted;
    # 3. all accepted (n = k): the target's next distribution is free
    if greedy:  # the residual of a one-hot p is p itself
        next_dist = p_target.index_select(0, n.view(1))[0]  # (V,)
        return Decision(n, _greedy_next(next_dist, argmax, n), uniforms, accept_prob, next_dist)
    p_n = p_target.index_select(0, n.view(1))[0]  # (V,); branch-free on n, so the host never waits for it
    q_n = q_draft.index_select(0, n.clamp(max=k - 1).view(1))[0]  # (V,); unused when n = k
    next_dist = torch.where(n < k, residual(p_n, q_n), p_n)
    return Decision(n, draw(next_dist, generator), uniforms, accept_prob, next_dist)


def _greedy_next(next_dist: torch.Tensor, argmax: torch.Tensor | None, n: torch.Tensor) -> torch.Tensor:
    """The greedy next token: where the one-hot row n is hot (argmax[n] when the warp kept it)."""
    return next_dist.argmax() if argmax is None else argmax.index_select(0, n.view(1))[0]
