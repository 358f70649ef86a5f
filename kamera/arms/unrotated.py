"""Unrotated reuse: the canonical KV(B|∅) spliced at B's native positions *without* R(δ) (Fig. 12a).

Source: Fig. 12(a), the "blind (norot)" bar: the chunk reused at its new position with its keys still
rotated for the position it was prefilled at. It is a diagnostic, not a method: against ``blind``
(R(δ)·KV(B|∅)) it shows what re-rotation fixes, as ``patch_r*`` against ``blind`` shows what the
patch fixes. Only rotary channels differ from blind (content channels are the same tensors), and
with δ = 0 (``canonical_context=native``) it *is* blind reuse, bit for bit. Stores nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, register
from kamera.core import ChunkKV
from kamera.reuse.context import ReuseContext


def unrotated_kv(ctx: ReuseContext) -> ChunkKV:
    """KV(B|∅) as prefilled, labelled with B's native positions (the keys are not turned by δ). A hybrid's
    recurrent state pages carry no position, so they go along unchanged, as in blind reuse."""
    canonical = ctx.canonical
    return ChunkKV(canonical.specs, canonical.layers, ctx.native_positions(ctx.b), canonical.state)


@register
@dataclass
class UnrotatedArm(Arm):
    name = "unrotated"
    needs = frozenset({"canonical"})

    def run(self, ctx: ReuseContext) -> ArmOutput:
        return ArmOutput(ctx.query(unrotated_kv(ctx), tag="unrotated"), 0, {})
