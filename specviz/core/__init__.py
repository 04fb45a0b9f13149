"""The algorithm in plain torch: sampling warps, the verify rule, the decoding loop and its records.

Notation follows Leviathan, Kalman & Matias (2023): ``p_target`` is the target model's
distribution, ``q_draft`` the draft's, ``x`` a drafted token. Nothing here imports
streamlit or transformers.
"""

from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.divergence import Divergence, first_divergence
from specviz.core.metrics import RunMetrics, run_metrics
from specviz.core.protocols import CachedLM, Drafter, TreeCachedLM, TreeDrafter
from specviz.core.records import StepRecord, TokenDist
from specviz.core.sampling import SamplingConfig, draw, warp
from specviz.core.verify import Decision, decide, residual

__all__ = [
    "CachedLM",
    "Decision",
    "DecodeConfig",
    "Drafter",
    "Divergence",
    "RunMetrics",
    "SamplingConfig",
    "SpeculativeDecoder",
    "StepRecord",
    "TokenDist",
    "TreeCachedLM",
    "TreeDrafter",
    "decide",
    "draw",
    "first_divergence",
    "residual",
    "run_metrics",
    "warp",
]
