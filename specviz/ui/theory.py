"""The Speedup theory page's plumbing: the formulas it evaluates (specviz.core.theory), the cost profiles
(shipped, or this machine measured now inside one queue turn). The page only draws."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specviz.config import EMBEDDED_TARGET
from specviz.core.theory import MAX_K, VerifyCurve, acceptance_rate, best_k, expected_tokens, round_cost, speedup, verify_cost_at
from specviz.experiments import cost_profile as cost_profile
from specviz.experiments.cost_profile import CostProfile, shipped_profiles
from specviz.ui import access
from specviz.ui import models as ui_models

__all__ = ["MAX_K", "CostProfile", "TheoryNumbers", "VerifyCurve", "acceptance_rate", "best_k", "measure_this_machine", "shipped_profiles", "theory_numbers"]


@dataclass(frozen=True)
class TheoryNumbers:
    """The headline numbers at one (alpha, k, c, verify cost)."""

    tokens_per_pass: float
    round_cost: float  # c_verify(k) + k c, in 1-token target passes
    verify_cost: float  # c_verify(k)
    speedup: float
    best_k: int
    best_speedup: float


def theory_numbers(alpha: float, k: int, c: float, verify_cost: float | VerifyCurve) -> TheoryNumbers:
    kb = best_k(alpha, c, verify_cost)
    return TheoryNumbers(
        expected_tokens(alpha, k), round_cost(k, c, verify_cost), verify_cost_at(verify_cost, k), speedup(alpha, k, c, verify_cost),
        kb, speedup(alpha, kb, c, verify_cost),
    )  # fmt: skip


def measure_this_machine(on_progress: Callable[[int, int, str], None]) -> CostProfile:
    """Profile the embedded target's passes and the offline drafters as a long job: one model turn per measurement
    (no pass overlaps anyone's rounds, and their rounds run between measurements); one repeat in shared mode."""
    target = ui_models.get_model(EMBEDDED_TARGET)
    repeats = 1 if access.current_policy().shared else 3
    with access.long_job(target, "the cost profile", "its next measurement") as turn:
        return cost_profile.measure_profile(target, repeats=repeats, label="this machine, measured now", turn=turn, on_progress=on_progress)
