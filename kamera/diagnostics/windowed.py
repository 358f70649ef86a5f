"""How much of Δ the sliding-window layers carry, and what patching them alone buys (Gemma 3, Gemma-3n).

For one item's context, over its cache-owning layers split by type (``adapter.layer_window(ℓ)`` set: sliding,
else global):

- ``energy_share_sliding``: Σ_sliding ‖Δ_ℓ‖² / Σ_all ‖Δ_ℓ‖², both channels (K and V), layer 0 included (its Δ is
  relocation rounding); ``layers_sliding`` the fraction of layers that are sliding (5/6 on Gemma 3), so the share
  can be read against the layer count;
- ``in_window_share``: of the sliding layers' ‖Δ‖², the share on B's rows the query's first token still sees at a
  sliding layer (the last window − 1 slots before the query); the rest is stored and patched but read by a query
  forward only through the global layers and through B's own later rows;
- ``kl_sliding_only`` / ``kl_global_only`` (and ``eta_*``): the query's KL to re-prefill with the rank-``rank`` patch
  applied at the sliding layers only / the global layers only (the others blind), beside ``kl_blind`` and
  ``kl_patch`` (every layer patched).

Records are one dict per item (:func:`windowed_deficit`); ``make real`` prints their means
(:mod:`kamera.real.identities`).
"""

from __future__ import annotations

import torch

from kamera.metrics import eta, kl
from kamera.reuse.context import ReuseContext


def sliding_layers(ctx: ReuseContext) -> list[int]:
    a = ctx.adapter
    return [l for l in range(a.n_layers) if a.layer_window(l) is not None]


@torch.no_grad()
def windowed_deficit(ctx: ReuseContext, rank: int | None = None) -> dict[str, float]:
    """One item's record (module docstring); ``rank`` None is the full-rank patch."""
    a = ctx.adapter
    sliding = sliding_layers(ctx)
    global_ = [l for l in range(a.n_layers) if l not in set(sliding)]
    energy = [sum(float(t.double().pow(2).sum()) for t in chans) for chans in ctx.deficit.layers]
    total = sum(energy) or 1.0
    out: dict[str, float] = {
        "n_b": float(ctx.n_b),
        "layers_sliding": len(sliding) / a.n_layers,
        "energy_share_sliding": sum(energy[l] for l in sliding) / total,
    }
    if sliding:
        window = a.layer_window(sliding[0])
        b0, b1 = ctx.ranges[ctx.b]
        seen = torch.arange(b0, b1) >= ctx.ranges[ctx.q][0] - (window - 1)  # slots the query's first row sees
        sl = sum(energy[l] for l in sliding) or 1.0
        inside = sum(float(t[seen].double().pow(2).sum()) for l in sliding for t in ctx.deficit.layers[l])
        out["in_window_share"] = inside / sl
    ref = ctx.reprefill_logits
    kl_blind = kl(ref, ctx.blind.logits)
    patch = ctx.patch.truncate(rank)
    out["kl_blind"] = kl_blind
    out["kl_patch"] = kl(ref, ctx.query(patch.apply(ctx.relocated)).logits)
    for name, layers in (("sliding_only", sliding), ("global_only", global_)):
        value = kl(ref, ctx.query(patch.restrict(layers).apply(ctx.relocated)).logits)
        out[f"kl_{name}"] = value
        out[f"eta_{name}"] = eta(value, kl_blind)
    out["eta_patch"] = eta(out["kl_patch"], kl_blind)
    return out
