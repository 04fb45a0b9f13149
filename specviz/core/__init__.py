"""The algorithm in plain torch: sampling warps, the verify rule, the decoding loop and its records.

Notation follows Leviathan, Kalman & Matias (2023): ``p_target`` is the target model's
distribution, ``q_draft`` the draft's, ``x`` a drafted token. Nothing here imports
streamlit or transformers.
"""

from specviz.core.decoding import CachedLM, DecodeConfig, SpeculativeDecoder
from specviz.core.records import RunStats, StepRecord, TokenDist, summarize
from specviz.core.sampling import SamplingConfig, warp
from specviz.core.verify import Verdict, residual, verify

__all__ = [
    "CachedLM",
    "DecodeConfig",
    "RunStats",
    "SamplingConfig",
    "SpeculativeDecoder",
    "StepRecord",
    "TokenDist",
    "Verdict",
    "residual",
    "summarize",
    "verify",
    "warp",
]
