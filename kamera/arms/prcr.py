"""PRCR (Wang et al., arXiv 2606.26631): B's raw (pre-RoPE) keys stored with their positions, re-bound at B's place.

Source: the paper (no public code found). Its Raw Visual Evidence Memory stores each layer's visual K before rotation
and V, with the tokens' original coordinates; at reuse it assigns the entries positions compatible with the current
decoding state, applies RoPE to the raw keys at those positions and injects them with their V into the active cache:
no forward and no correction of the conditioning.

What this arm runs: the raw page is the canonical KV(B|∅)'s keys taken back through the model's own cos / sin at the
positions they were prefilled at (:mod:`kamera.arms.prerope`, float64; V and any recurrent state pages as they are),
and the keys are re-bound once with the model's own cos / sin at the positions B has in the window, its native ones.
It never applies R(δ) to rotated keys. RoPE composes, R(p')·k_raw = R(p' − p)·R(p)·k_raw, so at those positions this
is relocation (blind reuse) up to rounding, for 1-D RoPE and M-RoPE alike: the same attention, no other difference
(docs/baselines.md §8; ``tests/arms/test_new_baselines.py``). PRCR's own re-assignment, Position-Constrained
Rebinding, gives revisited visual tokens fractional positions in a short extension before the next text token
mid-decoding; a chunk served at its place in the window keeps its native positions, so that re-assignment is not run.
Rotate-half keys with one rotary table only (as :mod:`kamera.arms.shadowkv`). Bytes: the raw page takes the canonical
page's place, nothing stored beyond it (0, as blind reuse).
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, ArmRefusal, register
from kamera.arms.prerope import frame_refusal, rope, rope_tables, unrope
from kamera.core import ChunkKV
from kamera.models.base import Adapter
from kamera.reuse.context import ReuseContext


def rebound_kv(ctx: ReuseContext) -> ChunkKV:
    """B's KV as PRCR serves it: raw keys re-bound at B's native positions, the canonical's V (and state pages)."""
    canonical, native = ctx.canonical, ctx.native_positions(ctx.b)
    rotary = [(c, s.rotary.rotary_dim) for c, s in enumerate(canonical.specs) if s.rotary is not None]
    tables = {d: (rope_tables(ctx.adapter, canonical.positions, d), rope_tables(ctx.adapter, native, d))
              for _, d in rotary}
    layers = []
    for chans in canonical.layers:
        new = list(chans)
        for c, d in rotary:
            (cos0, sin0), (cos1, sin1) = tables[d]
            new[c] = rope(unrope(chans[c].double(), cos0, sin0), cos1, sin1).to(chans[c].dtype)
        layers.append(tuple(new))
    return ChunkKV(canonical.specs, layers, native, canonical.state)


@register
@dataclass
class PrcrArm(Arm):
    name = "prcr"
    version = 2  # 1: an alias of blind (R(δ) on the canonical); 2: raw keys re-bound at B's positions
    needs = frozenset({"canonical"})

    def refuses(self, adapter: Adapter) -> str | None:
        return frame_refusal(self.name, adapter) or super().refuses(adapter)

    def run(self, ctx: ReuseContext) -> ArmOutput:
        reason = self.refuses(ctx.adapter)
        if reason:
            raise ArmRefusal(reason)
        return ArmOutput(ctx.query(rebound_kv(ctx), tag=self.name), 0, {})
