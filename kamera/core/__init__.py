"""The Kamera operator as pure tensor math: R(δ), Δ, the rank-m patch, the orbit mean.

Knows nothing of transformers, benchmarks or Hydra; adapters in ``kamera.models`` read a model's
cache into a :class:`ChunkKV` and write one back.
"""

from kamera.core.chunk import (
    ChannelSpec,
    ChunkKV,
    concat,
    max_abs_diff,
    max_rel_diff,
    relocate,
    same_positions,
)
from kamera.core.patch import (
    AUTO_ROTARY,
    Deficit,
    Factors,
    Patch,
    deepest,
    default_rotary_rank,
    deficit,
    family_rank_view,
    orbit_mean,
    singular_values,
)
from kamera.core.rope import RotarySpec, rotate

__all__ = [
    "AUTO_ROTARY",
    "ChannelSpec",
    "ChunkKV",
    "Deficit",
    "Factors",
    "Patch",
    "RotarySpec",
    "concat",
    "deepest",
    "default_rotary_rank",
    "deficit",
    "family_rank_view",
    "max_abs_diff",
    "max_rel_diff",
    "orbit_mean",
    "relocate",
    "rotate",
    "same_positions",
    "singular_values",
]
