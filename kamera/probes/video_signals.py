"""Per visual token of B: ‖Δ_i‖ beside optical-flow motion, warp residual, frame similarity and the
vision-embedding difference to the previous frame (Fig. 4b).

Wraps :func:`kamera.diagnostics.video.token_signals`. Records are per item and token; a renderer
computes Spearman's ρ per item (:func:`~kamera.diagnostics.video.signal_spearman`) and summarises
over items. An item without a (frame, previous frame) pair of equal token grids (an image benchmark
whose B holds one picture after a differently sized one, a text chunk) has nothing to measure: the
probe returns no records for it, logs why, and the store lists the item under ``empty_probes``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.diagnostics.video import NoFramePairs, check_cell_px, token_signals
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape

log = logging.getLogger("kamera.probes")


@register
@dataclass
class VideoSignalsProbe(Probe):
    """``cell_px``: each token's cell side in pixels when the frames are resized for optical flow."""

    name = "video_signals"
    needs = frozenset({"deficit"})
    cell_px: int = 16

    def __post_init__(self) -> None:
        check_cell_px(self.cell_px)

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). Nothing beyond
        the shared Δ (flow and warp signals run on the CPU, in ``ITEM_S``)."""
        return []

    def run(self, ctx: ReuseContext) -> list[dict]:
        try:
            return token_signals(ctx, self.cell_px)
        except NoFramePairs as why:
            log.warning("video_signals: nothing to measure on this item (%s)", why)
            return []
