"""The 4D-mask oracle (§2): one forward over [prefix A B query] with B ↛ A blocked.

It removes exactly the conditioning at B's native positions, so KL(re-prefill ‖ oracle) is the
loss-KL of Table 7, free of any relocation.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, register
from kamera.reuse.context import ReuseContext


@register
@dataclass
class Oracle4DArm(Arm):
    """A diagnostic, not a reuse method: its forward recomputes all of B (blind to A), so like re-prefill
    its bytes are B's whole page and its recomputed cells every (B token, layer); the forward is the
    item's shared oracle forward (``forwards`` 0)."""

    name = "oracle4d"
    needs = frozenset({"oracle"})

    def run(self, ctx: ReuseContext) -> ArmOutput:
        return ArmOutput(ctx.oracle, ctx.page_bytes(), {}, recomputed_tokens=ctx.n_b * ctx.adapter.n_layers)
