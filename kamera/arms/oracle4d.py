"""The 4D-mask oracle (§2): one forward over [prefix A B query] with B ↛ A blocked.

It removes exactly the conditioning at B's native positions, so KL(re-prefill ‖ oracle) is the
loss-KL of Table 7, free of any relocation.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, register
from kamera.context import ReuseContext


@register
@dataclass
class Oracle4DArm(Arm):
    name = "oracle4d"
    needs = frozenset({"oracle"})

    def run(self, ctx: ReuseContext) -> ArmOutput:
        return ArmOutput(ctx.oracle, 0, {})
