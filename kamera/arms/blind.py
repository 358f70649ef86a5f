"""Blind reuse: the floor, prefix KV ∥ A KV ∥ R(δ)·KV(B|∅), no patch."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, register
from kamera.reuse.context import ReuseContext


@register
@dataclass
class BlindArm(Arm):
    """Relocation only; stores nothing beyond the canonical page."""

    name = "blind"
    needs = frozenset({"blind"})

    def run(self, ctx: ReuseContext) -> ArmOutput:
        return ArmOutput(ctx.blind, 0, {})
