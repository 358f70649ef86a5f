"""Re-prefill: the ceiling, one full forward over [prefix · A · B · query]."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, register
from kamera.context import ReuseContext


@register
@dataclass
class ReprefillArm(Arm):
    """Recomputes all of B in context, so it 'recomputes' B's whole page."""

    name = "reprefill"
    needs = frozenset({"full"})

    def run(self, ctx: ReuseContext) -> ArmOutput:
        return ArmOutput(ctx.full, ctx.page_bytes(), {})
