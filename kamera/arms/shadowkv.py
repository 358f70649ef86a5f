"""ShadowKV-style low-rank reconstruction of B's absolute keys at matched bytes (Table 6, "low-rank-K").

Source: ShadowKV (Sun et al., ICML 2025); code read at ``WilliamBy/ShadowKV`` models/kv_cache.py
(a fork with the ByteDance header): at prefill, keys *before* RoPE are flattened to
tokens × (kv_heads · head_dim) and kept as a rank-r SVD (``get_svd``, default rank 160); at decode
the selected rows are rebuilt as ``U[rows] @ SV`` and RoPE is applied at their positions; V is kept
exact. The paper's Table 6 gives this "low-rank-K reconstruction" the patch's byte budget and notes
it "rebuilds absolute K, which the canonical already has, not the conditioning delta".

What this arm stores and serves, per layer: the rank-r SVD of B's conditioned pre-RoPE keys
K(B|A) (the absolute keys a compile-time forward produces, as the patch's is), rebuilt and re-roped
at B's native positions; V is the reused R(δ)·KV(B|∅) value (the exact V ShadowKV keeps is, at reuse,
the canonical one; storing V(B|A) too would cost half the page). Keys are un-roped with the model's
own cos/sin at B's positions (so M-RoPE sections are exact); full rank gives back K(B|A).

Choices: no landmark/outlier chunks and no decode-time selection (every row of B is rebuilt; the
budget is spent on rank alone). ``rank`` r (default 32) or ``match_rank`` m, which overrides it with
the K-only rank of equal bytes to a rank-m patch (:func:`~kamera.arms.budget.matched_k_rank`).
Bytes: ``min(r, n_B, w_K) · (n_B + w_K)`` per layer. MLA families are refused: their cache holds a
latent c_KV from which both keys and values are expanded, plus a one-head k_pe, so there is no
absolute-K matrix to rebuild without also changing V.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kamera.arms.base import Arm, ArmOutput, ArmRefusal, register
from kamera.arms.budget import channel_ranks, matched_k_rank, widths
from kamera.arms.prerope import frame_refusal, rope, rope_tables, unrope
from kamera.knobs import check_count
from kamera.models.base import Adapter
from kamera.reuse.context import ReuseContext


@register
@dataclass
class ShadowKVArm(Arm):
    name = "shadowkv"
    needs = frozenset({"relocated", "conditioned"})
    rank: int = 32
    match_rank: int | None = None

    def __post_init__(self) -> None:
        check_count(self.name, "rank", self.rank)
        check_count(self.name, "match_rank", self.match_rank, allow_none=True)

    def refuses(self, adapter: Adapter) -> str | None:
        if adapter.attention == "MLA":
            return (
                "shadowkv rebuilds per-head absolute keys; an MLA cache holds the latent c_KV (keys and "
                "values both expand from it) and a one-head k_pe, so there is no K matrix to rebuild alone"
            )
        return frame_refusal(self.name, adapter) or super().refuses(adapter)

    def run(self, ctx: ReuseContext) -> ArmOutput:
        reason = self.refuses(ctx.adapter)
        if reason:
            raise ArmRefusal(reason)
        specs = ctx.adapter.specs
        kc = next(i for i, s in enumerate(specs) if s.rotary is not None)
        spec = specs[kc]
        r = self.rank
        if self.match_rank is not None:
            r = matched_k_rank(channel_ranks(ctx, self.match_rank), ctx.n_b, widths(ctx), spec.width)
        cos, sin = rope_tables(ctx.adapter, ctx.conditioned.positions, spec.rotary.rotary_dim)
        layers = []
        for l, chans in enumerate(ctx.conditioned.layers):
            pre = unrope(chans[kc].double(), cos, sin)
            u, s, vt = torch.linalg.svd(pre.flatten(1), full_matrices=False)
            low = ((u[:, :r] * s[:r]) @ vt[:r]).reshape(pre.shape)
            rebuilt = rope(low, cos, sin).to(chans[kc].dtype)
            new = list(ctx.relocated.layers[l])
            new[kc] = rebuilt
            layers.append(tuple(new))
        out = ctx.query(ctx.relocated.with_layers(layers), tag=self.name)
        eff = min(r, ctx.n_b, spec.width)
        item = ctx.conditioned.layers[0][kc].element_size()
        nbytes = ctx.adapter.n_layers * eff * (ctx.n_b + spec.width) * item
        return ArmOutput(out, nbytes, {**self.params(), "k_rank": r, "effective_rank": eff})
