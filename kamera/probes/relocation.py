"""Relative error of relocated keys against keys prefilled at the new position, vs distance (Fig. 12b).

Wraps :func:`kamera.diagnostics.relocation.relocation_error` on the item's B span: B prefilled alone
at 0 and alone at each distance δ, per layer and rotary channel ‖R(δ)·K(at 0) − K(at δ)‖ / ‖K(at δ)‖,
plus the bf16 storage floor on float32 models. It measures the model's rotary (its scheme, base and
precision) more than the item, so a few items per model suffice; records are per item and a
renderer takes the median over items. The model's dtype is the job's ``dtype`` key (the
diagnostic's own ``dtype`` key is dropped so it cannot shadow it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kamera.diagnostics.relocation import DISTANCES, relocation_error
from kamera.knobs import check_counts
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


@register
@dataclass
class RelocationProbe(Probe):
    """``distances``: the relocation distances δ in positions (default 1, 10, …, 10⁵)."""

    name = "relocation"
    needs = frozenset()
    distances: list[int] = field(default_factory=lambda: list(DISTANCES))

    def __post_init__(self) -> None:
        self.distances = check_counts("relocation", "distances", self.distances)

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). B prefilled
        alone at 0 and at each distance."""
        return [shape.b_alone(1 + len(self.distances))]

    def run(self, ctx: ReuseContext) -> list[dict]:
        records = relocation_error(ctx.adapter, ctx.enc.spans[ctx.b], self.distances)
        return [{k: v for k, v in r.items() if k != "dtype"} for r in records]
