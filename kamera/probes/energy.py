"""Per layer and channel: the fraction of ‖Δ‖² a rank-m patch captures, and the 90%-energy rank (Fig. 3a).

Wraps :func:`kamera.diagnostics.energy.energy_curve` (read from the item's full-rank patch, so the
probe adds no decomposition when a patch arm runs beside it). Records are per item; a renderer
averages the curves over items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.diagnostics.energy import energy_curve
from kamera.knobs import check_counts, check_share
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


@register
@dataclass
class EnergyProbe(Probe):
    """``ranks``: the m to read (None: 1, 2, 4, … and the block's full rank); ``fraction``: the e90 level."""

    name = "energy"
    needs = frozenset({"patch"})
    ranks: list[int] | None = None
    fraction: float = 0.9

    def __post_init__(self) -> None:
        if self.ranks is not None:
            self.ranks = check_counts("energy", "ranks", self.ranks)
        check_share("energy", "fraction", self.fraction)

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). Nothing beyond
        the shared patch."""
        return []

    def run(self, ctx: ReuseContext) -> list[dict]:
        return energy_curve(ctx, self.ranks, self.fraction)
