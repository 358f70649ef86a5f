"""Per layer: how many of A's keys hold 90% of the attention B's queries pay A (Fig. 3c).

Wraps :func:`kamera.diagnostics.landmarks.landmark_keys`: B's rows are rerun layer by layer on the
full prefill's cache with eager attention (a few extra layer passes per item, tag
``probe_landmarks``). Records are per item (``n_a`` = A's token count); a renderer takes the median
over items per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.diagnostics.landmarks import landmark_keys
from kamera.knobs import check_share
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


@register
@dataclass
class LandmarksProbe(Probe):
    """``fraction``: the share of B's attention on A the landmark keys must hold."""

    name = "landmarks"
    needs = frozenset({"full", "conditioned"})
    drives_layers = True
    fraction: float = 0.9

    def __post_init__(self) -> None:
        check_share("landmarks", "fraction", self.fraction)

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). B's rows re-run
        layer by layer on the full prefill's cache: one pass of B over the item."""
        return [shape.b_in_context()]

    def run(self, ctx: ReuseContext) -> list[dict]:
        return landmark_keys(ctx, self.fraction)
