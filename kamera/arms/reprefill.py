"""Re-prefill: the ceiling, one full forward over [prefix · A · B · query]."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, register
from kamera.reuse.context import ReuseContext


@register
@dataclass
class ReprefillArm(Arm):
    """Recomputes all of B in context: its bytes are B's whole page and its recomputed cells every
    (B token, layer). Its one forward is the item's shared re-prefill, so a row's ``forwards`` (the
    forwards an arm runs beyond the shared ones) is 0."""

    name = "reprefill"
    needs = frozenset({"full"})

    def run(self, ctx: ReuseContext) -> ArmOutput:
        return ArmOutput(ctx.full, ctx.page_bytes(), {}, recomputed_tokens=ctx.n_b * ctx.adapter.n_layers)
