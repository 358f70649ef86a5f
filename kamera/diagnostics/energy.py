"""Fig. 3(a): how much of each layer's deficit a rank-m patch captures.

For each layer ℓ and channel c, with σ the singular values of Δ_ℓ,c (the n_B × width matrix):

    energy(ℓ, c, m) = Σ_{i ≤ m} σ_i² / Σ_i σ_i²           (1.0 where Δ_ℓ,c = 0)

read from the item's full-rank patch (``ctx.patch``: one SVD per layer-channel, shared with the
patch arms, so the probe adds no decomposition). A rank above a block's own rank min(n_B, width)
keeps every direction, so the curve is exactly 1.0 there. The paper plots the MLA content channel
(c_KV); records carry every channel with its ``role`` so a renderer picks the content one on any
family. ``e90_rank`` records add the smallest m holding 90% (the figure's "90% energy" marker) and
``above_rounding`` records (value 1.0 / 0.0) whether that layer-channel's Δ is above the cache dtype's
rounding floor (:func:`kamera.metrics.above_rounding`, the layer rule of ``e90_columns``; layer 0 is below
it, its Δ being rounding), so a summary over layers counts the layers ``e90_columns`` counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kamera.diagnostics.common import role
from kamera.knobs import check_counts
from kamera.metrics import above_rounding, energy_rank
from kamera.reuse.context import ReuseContext


def default_ranks(full_rank: int) -> list[int]:
    """1, 2, 4, … below ``full_rank``, then ``full_rank`` itself."""
    out, m = [], 1
    while m < full_rank:
        out.append(m)
        m *= 2
    return [*out, full_rank]


def energy_curve(ctx: ReuseContext, ranks: Sequence[int] | None = None, fraction: float = 0.9) -> list[dict]:
    """Energy captured per (layer, channel) at each rank m, and the e90 rank.

    Records: ``{layer, channel, role, rank, quantity, value}`` with quantity ``"energy_captured"``
    (value in [0, 1], at ``rank`` m), ``"e90_rank"`` (value = smallest m holding ``fraction`` of
    ‖Δ‖², 0 where Δ = 0; ``rank`` None) or ``"above_rounding"`` (1.0 where the layer-channel's Δ is
    above rounding and counts in an e90 summary, else 0.0; ``rank`` None)."""
    patch, conditioned = ctx.patch, ctx.conditioned
    ranks = default_ranks(patch.full_rank) if ranks is None else check_counts("energy", "ranks", ranks)
    out = []
    for l, chans in enumerate(patch.factors):
        for c, (blocks, spec) in enumerate(zip(chans, patch.specs, strict=True)):
            s2 = torch.cat([b.s for b in blocks]).double() ** 2  # one block per layer-channel
            cum = torch.cumsum(s2, 0)
            total = float(cum[-1])  # the same sum as every prefix, so full rank gives exactly 1.0
            for m in ranks:
                kept = float(cum[min(m, s2.numel()) - 1])
                out.append({"layer": l, "channel": spec.name, "role": role(spec), "rank": m,
                            "quantity": "energy_captured", "value": 1.0 if total == 0 else kept / total})
            out.append({"layer": l, "channel": spec.name, "role": role(spec), "rank": None,
                        "quantity": "e90_rank", "value": float(energy_rank(s2.sqrt(), fraction))})
            out.append({"layer": l, "channel": spec.name, "role": role(spec), "rank": None,
                        "quantity": "above_rounding", "value": float(above_rounding(s2.sqrt(), conditioned, l, c))})
    return out
