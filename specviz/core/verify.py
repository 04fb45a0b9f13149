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

DraftFate = Literal["accepted", "rejected", "discarded"]
EmitFate = Literal["accepted", "resampled", "bonus", "target"]


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
        k = self.uniforms.numel()
        n = self.num_accepted
        return ("accepted",) * n + (("rejected",) if n < k else ()) + ("discarded",) * max(0, k - n - 1)


def one_hot_q(drafted: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(k,) ids -> (k, V) one-hot q_draft, for drafters that propose tokens without a distribution."""
    q = torch.zeros(drafted.numel(), vocab_size)
    return q.scatter_(1, drafted.view(-1, 1), 1.0)


def residual(p_target: torch.Tensor, q_draft: torch.Tensor) -> torch.Tensor:
    """Normalised max(0, p_target - q_draft) over the last dim. Falls back to p_target if p <= q everywhere."""
    diff = (p_target - q_draft).clamp_min(0.0)
    mass = diff.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, diff / mass.clamp_min(1e-30), p_target)


def verify(
    p_target: torch.Tensor,
    q_draft: torch.Tensor,
    drafted: torch.Tensor,
    generator: torch.Generator,
) -> Verdict:
    """p_target (k+1, V), q_draft (k, V), drafted (k,) -> Verdict. All tensors on the CPU, float32."""
    k = drafted.numel()
    if p_target.shape[0] != k + 1 or q_draft.shape[0] != k:
        raise ValueError(f"need p_target of k+1 rows and q_draft of k rows for k={k} drafts")
    uniforms = torch.rand(k, generator=generator)
    rows = torch.arange(k)
    p_x = p_target[rows, drafted]
    q_x = q_draft[rows, drafted]
    # q_x == 0 cannot happen for a token drawn from q; treat it as "reject" rather than dividing by zero.
    accept_prob = torch.where(q_x > 0, (p_x / q_x.clamp_min(1e-30)).clamp(max=1.0), torch.zeros_like(p_x))
    accepted = uniforms < accept_prob
    # 1. first rejection, vectorised: count the leading run of accepts
    num_accepted = int(accepted.int().cumprod(dim=0).sum().item())
    if num_accepted < k:
        # 2. rejected at position n: resample from the mass the draft under-weighted
        res = residual(p_target[num_accepted], q_draft[num_accepted])
        token = int(torch.multinomial(res, 1, generator=generator).item())
        return Verdict(num_accepted, uniforms, accept_prob, token, "resampled", res)
    # 3. all accepted (or nothing drafted): the target's next distribution is free
    token = int(torch.multinomial(p_target[k], 1, generator=generator).item())
    return Verdict(num_accepted, uniforms, accept_prob, token, "bonus" if k else "target", None)
