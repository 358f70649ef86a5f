"""Per layer and channel: ‖Δ‖_F, ‖KV(B|A)‖_F and their ratio (Fig. 3b's relative deficit norm).

Δ = KV(B|A) − R(δ)·KV(B|∅) is the conditioning deficit in B's native frame (relocation removed), so
its relative norm ‖Δ‖_F / ‖KV(B|A)‖_F says how much of B's cached page the context A changed, layer
by layer and channel by channel (K / V, or MLA's c_KV / k_pe). Layer 0's K/V are a function of the
token embedding and its position only, so there the ratio is relocation rounding, never context.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.context import ReuseContext
from kamera.probes.base import Probe, register


@register
@dataclass
class DeficitNormsProbe(Probe):
    name = "deficit_norms"
    needs = frozenset({"conditioned", "deficit"})

    def run(self, ctx: ReuseContext) -> list[dict]:
        records = []
        for layer, (deltas, page) in enumerate(zip(ctx.deficit.layers, ctx.conditioned.layers, strict=True)):
            for spec, d, kv in zip(ctx.deficit.specs, deltas, page, strict=True):
                delta_norm, page_norm = float(d.float().norm()), float(kv.float().norm())
                records.append({
                    "layer": layer, "channel": spec.name, "delta_norm": delta_norm, "conditioned_norm": page_norm,
                    "ratio": delta_norm / page_norm if page_norm > 0 else float("nan"),
                })
        return records
