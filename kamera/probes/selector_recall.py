"""Recall of the true top-50% ‖Δ‖ tokens by cheap selectors (Fig. 4a), one record per selector and item.

Wraps :func:`kamera.diagnostics.selectors.selector_recall`; the selectors are the token arms' own
``select`` (oracle_topp, cross_mass, first_k) plus the canonical's K-norm and seeded random subsets.
Records are per item; a renderer averages recall over items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kamera.arms.cross_mass import CrossMassArm
from kamera.arms.first_k import FirstKArm
from kamera.arms.oracle_topp import OracleTopPArm
from kamera.diagnostics.selectors import DEFAULT_SELECTORS, check_selectors, selector_recall
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


@register
@dataclass
class SelectorRecallProbe(Probe):
    """``selectors``: names of :data:`kamera.diagnostics.selectors.SELECTORS` or ``random``;
    ``fraction``: the true set's share of B (0.5); ``seed`` / ``draws``: the random selector's subsets."""

    name = "selector_recall"
    # the selectors' own arms' shared quantities, plus the canonical (K-norm)
    needs = OracleTopPArm.needs | CrossMassArm.needs | FirstKArm.needs | frozenset({"canonical"})
    drives_layers = True
    selectors: list[str] = field(default_factory=lambda: ["oracle", *DEFAULT_SELECTORS])  # oracle: the recall-1 check
    fraction: float = 0.5
    seed: int = 0
    draws: int = 32

    def __post_init__(self) -> None:
        check_selectors(self.selectors, self.fraction, self.draws)

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). Nothing beyond
        the shared quantities its selectors read."""
        return []

    def run(self, ctx: ReuseContext) -> list[dict]:
        return selector_recall(ctx, self.selectors, self.fraction, self.seed, self.draws)
