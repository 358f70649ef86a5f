"""Per layer and channel: ‖Δ‖_F, ‖KV(B|A)‖_F and the relative norms of Fig. 3(b).

Δ = KV(B|A) − R(δ)·KV(B|∅) is the conditioning deficit in B's native frame (relocation removed), so
its relative norm ‖Δ‖_F / ‖KV(B|A)‖_F (``ratio``, the figure's "conditioning") says how much of
B's cached page the context A changed, layer by layer and channel by channel (K / V, or MLA's
c_KV / k_pe). Beside it, from :func:`kamera.diagnostics.deficit_norm.deficit_norms`, each divided by
‖KV(B|A)‖_F: ``raw`` (the canonical as stored, not relocated) and ``position`` (what R(δ) alone
removes, the position confound); with ``oracle`` (one 4D-mask forward more per item)
``conditioning_a`` (what A itself adds) and ``position_residual`` (what the moved prefix distance
adds). Layer 0's K/V are a function of the token embedding and its position only, so there
``ratio`` is relocation rounding, never context. One record per (layer, channel) and item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.diagnostics.deficit_norm import deficit_norms
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


@register
@dataclass
class DeficitNormsProbe(Probe):
    """``oracle``: also split Δ with the 4D-mask oracle (conditioning_a, position_residual)."""

    name = "deficit_norms"
    needs = frozenset({"canonical", "relocated", "conditioned", "deficit"})
    oracle: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.oracle, bool):
            raise ValueError(f"deficit_norms oracle must be true or false, got {self.oracle!r}")

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). With ``oracle``,
        one 4D-mask forward over the item."""
        return [shape.full()] if self.oracle else []

    def run(self, ctx: ReuseContext) -> list[dict]:
        cells: dict[tuple[int, str], dict] = {}
        for r in deficit_norms(ctx, self.oracle):
            cell = cells.setdefault((r["layer"], r["channel"]), {"layer": r["layer"], "channel": r["channel"],
                                                                 "role": r["role"]})
            cell[r["quantity"]] = r["value"]
        frob = ctx.deficit.frobenius()  # [layer][channel] ‖Δ‖_F
        channels = [s.name for s in ctx.deficit.specs]
        records = []
        for (layer, channel), cell in cells.items():
            page, ratio = cell.pop("kv_norm"), cell.pop("conditioning")
            records.append({**cell, "delta_norm": frob[layer][channels.index(channel)], "conditioned_norm": page,
                            "ratio": ratio})
        return records
