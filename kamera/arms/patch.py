"""The Kamera conditioning patch: R(δ)·KV(B|∅) + (UΣ)_m V_mᵀ (paper Eq. 1, §3, App. A).

Knobs: ``rank`` m (None = full) of the content channel (V, MLA c_KV), the "m" of every table and
figure; ``rotary_rank`` of the rotary channel (K, MLA k_pe): ``"auto"`` (default) is m on GQA / MHA
(K and V "both carry binding", App. A) and ⌈m/4⌉ on MLA's 64-wide k_pe band (§3, "a small added
k_pe-band patch"; see :func:`kamera.core.default_rotary_rank`), or an int / None to set it;
``layers`` ("all", "deep_half", or explicit indices); ``granularity`` ("layer": one SVD per
layer-channel, the paper's default; "head": one per KV head); ``patch_dtype`` (None, default: the
factors are stored and added in the model's dtype, what a deployment stores; ``"float32"``: the factors
are kept in float32, the patch is added in float32 and the sum rounded to the cache's dtype once, at
twice the bf16 bytes). All ranks and layer sets of a sweep share one SVD per item (cached on the
context); a float32 patch on a lower-precision model is one more decomposition per arm and item.
A knob at its default is left out of the arm's knobs, so rows stored before the knob keep their key.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kamera.arms.base import Arm, ArmOutput, register
from kamera.core import AUTO_ROTARY, Patch, deepest, family_rank_view
from kamera.knobs import check_count
from kamera.reuse.context import ReuseContext

LAYER_SETS = ("all", "deep_half")
AUTO = AUTO_ROTARY
PATCH_DTYPES = {"float32": torch.float32}  # beside None: the model's own dtype


def check_rotary_rank(arm: str, value) -> None:
    """``rotary_rank`` is "auto", None (full) or a non-negative int."""
    if value != AUTO:
        check_count(arm, "rotary_rank", value, allow_none=True)


def truncated(patch: Patch, rank: int | None, rotary_rank: int | str | None, attention: str) -> Patch:
    """``patch`` viewed at content rank m and its rotary rank ("auto": the family's default), by
    :func:`kamera.core.family_rank_view`, the rule the window probes use too."""
    return family_rank_view(patch, rank, attention, rotary_rank)


def patch_columns(patch: Patch) -> dict:
    """What a row says about the patch it applied: ranks per channel role, storage dtype, bytes per channel."""
    return {
        "effective_rank": patch.effective_rank,
        "effective_rotary_rank": patch.effective_rotary_rank,
        "patch_dtype": str(patch.dtype).removeprefix("torch."),
        "bytes_by_channel": patch.nbytes_by_channel(),
    }


@register
@dataclass
class PatchArm(Arm):
    name = "patch"
    needs = frozenset({"relocated", "patch"})
    rank: int | None = 16
    rotary_rank: int | str | None = AUTO
    layers: str | list[int] = "all"
    granularity: str = "layer"
    patch_dtype: str | None = None

    def __post_init__(self) -> None:
        check_count(self.name, "rank", self.rank, allow_none=True)
        check_rotary_rank(self.name, self.rotary_rank)
        if isinstance(self.layers, str) and self.layers not in LAYER_SETS:
            raise ValueError(f"patch layers must be one of {LAYER_SETS} or a list of indices, got {self.layers!r}")
        if not isinstance(self.layers, str) and (not isinstance(self.layers, list) or not self.layers or not all(
                isinstance(l, int) and not isinstance(l, bool) and l >= 0 for l in self.layers)):
            raise ValueError(f"patch layers must be one of {LAYER_SETS} or a list of layer indices >= 0, got "
                             f"{self.layers!r}")
        if self.granularity not in ("layer", "head"):
            raise ValueError(f"patch granularity must be 'layer' or 'head', got {self.granularity!r}")
        if self.patch_dtype is not None and self.patch_dtype not in PATCH_DTYPES:
            raise ValueError(f"patch patch_dtype must be null (the model's dtype) or one of {sorted(PATCH_DTYPES)}, "
                             f"got {self.patch_dtype!r}")

    def params(self) -> dict:
        """The knobs, ``patch_dtype`` left out at its default (None) so existing arms keep their knobs key."""
        out = super().params()
        if self.patch_dtype is None:
            del out["patch_dtype"]
        return out

    def full_patch(self, ctx: ReuseContext) -> Patch:
        """The item's full-rank patch with factors in ``patch_dtype`` (the context's shared one where that is the
        model's dtype)."""
        dtype = PATCH_DTYPES.get(self.patch_dtype, ctx.adapter.dtype)
        if dtype == ctx.adapter.dtype:
            return ctx.patch_for(self.granularity)
        return Patch.form(ctx.deficit, self.granularity, dtype=dtype)

    def problems(self, device: str = "cpu", n_layers: int | None = None) -> list[str]:
        """Explicit ``layers`` beyond the model's depth (known from its config before load)."""
        bad = [] if n_layers is None or isinstance(self.layers, str) else [l for l in self.layers if l >= n_layers]
        return [f"patch layers {bad} are beyond the model's {n_layers} layers (0..{n_layers - 1})"] if bad else []

    def run(self, ctx: ReuseContext) -> ArmOutput:
        patch = truncated(self.full_patch(ctx), self.rank, self.rotary_rank, ctx.adapter.attention)
        if self.layers == "deep_half":
            patch = patch.restrict(deepest(patch.n_layers))
        elif not isinstance(self.layers, str):
            patch = patch.restrict(self.layers)
        out = ctx.query(patch.apply(ctx.relocated), tag="patch")
        cols = patch_columns(patch)
        params = {**self.params(), **cols, "patched_layers": list(patch.patched_layers)}
        return ArmOutput(out, patch.nbytes(), params, patch_dtype=cols["patch_dtype"])
