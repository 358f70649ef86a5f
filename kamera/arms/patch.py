"""The Kamera conditioning patch: R(δ)·KV(B|∅) + (UΣ)_m V_mᵀ (paper Eq. 1, §3, App. A).

Knobs: ``rank`` m (None = full), ``layers`` ("all", "deep_half", or explicit indices), and
``granularity`` ("layer": one SVD per layer-channel, the paper's default; "head": one per KV head).
All ranks and layer sets of a sweep share one SVD per item (cached on the context).
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, patch_dtype, register
from kamera.context import ReuseContext
from kamera.core import deepest

LAYER_SETS = ("all", "deep_half")


@register
@dataclass
class PatchArm(Arm):
    name = "patch"
    needs = frozenset({"relocated", "patch"})
    rank: int | None = 16
    layers: str | list[int] = "all"
    granularity: str = "layer"

    def __post_init__(self) -> None:
        if self.rank is not None and (isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0):
            raise ValueError(f"patch rank must be a non-negative int or None (full), got {self.rank!r}")
        if isinstance(self.layers, str) and self.layers not in LAYER_SETS:
            raise ValueError(f"patch layers must be one of {LAYER_SETS} or a list of indices, got {self.layers!r}")
        if self.granularity not in ("layer", "head"):
            raise ValueError(f"patch granularity must be 'layer' or 'head', got {self.granularity!r}")

    def run(self, ctx: ReuseContext) -> ArmOutput:
        patch = ctx.patch_for(self.granularity).truncate(self.rank)
        if self.layers == "deep_half":
            patch = patch.restrict(deepest(patch.n_layers))
        elif not isinstance(self.layers, str):
            patch = patch.restrict(self.layers)
        out = ctx.query(patch.apply(ctx.relocated), tag="patch")
        params = {**self.params(), "effective_rank": patch.effective_rank, "patched_layers": list(patch.patched_layers)}
        return ArmOutput(out, patch.nbytes(), params, patch_dtype=patch_dtype(patch))
