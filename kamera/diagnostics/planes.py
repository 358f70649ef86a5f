"""Fig. 8: depth planes, one token × feature map of the correction's magnitude per layer.

The correction at layer ℓ and channel c is Δ_ℓ,c (n_B × width, what a full-rank patch adds). A plane
is |Δ| pooled to a fixed grid so every layer, item and model plots alike: the token axis into
``tokens`` bins and the feature axis into ``features`` bins, each bin the mean |Δ| of the cells it
covers (PyTorch adaptive average pooling: bin i of n cells into b bins covers [⌊i·n/b⌋, ⌈(i+1)·n/b⌉));
an axis shorter than its bin count keeps one bin per cell. Values are absolute, in the cache's units,
so a renderer normalises all planes of a figure to one maximum ("0 … max").

``basis`` picks the feature axis: ``"features"`` is the cache's own coordinates (heads · dim), the
caption's "feature-by-token map"; ``"components"`` is Δ in its singular basis, |Δ v_j| = |σ_j u_ij|
(read from the item's full-rank patch, components in decreasing σ), which shows the "≈90% of energy
in ≈11% of directions" side of the same figure.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kamera.diagnostics.common import role
from kamera.knobs import check_counts
from kamera.reuse.context import ReuseContext

BASES = ("features", "components")


def pooled(x: torch.Tensor, tokens: int, features: int) -> torch.Tensor:
    """[n, w] → [min(tokens, n), min(features, w)] bin means (float32)."""
    if x.dim() != 2 or x.numel() == 0:
        raise ValueError(f"pooled needs a non-empty [n, w] matrix, got shape {tuple(x.shape)}")
    size = (min(tokens, x.shape[0]), min(features, x.shape[1]))
    return F.adaptive_avg_pool2d(x.float()[None, None], size)[0, 0]


def check_planes(tokens: int, features: int, basis: str) -> None:
    """Bin counts ≥ 1 and a known basis."""
    check_counts("depth planes", "tokens / features bins", [tokens, features])
    if basis not in BASES:
        raise ValueError(f"basis must be one of {BASES}, got {basis!r}")


def depth_planes(ctx: ReuseContext, tokens: int = 16, features: int = 16, basis: str = "features") -> list[dict]:
    """Mean |Δ| per (layer, channel, token bin, feature bin).

    Records: ``{layer, channel, role, basis, token_bin, feature_bin, n_token_bins, n_feature_bins,
    quantity: "mean_abs", value}``."""
    check_planes(tokens, features, basis)
    out = []
    for l in range(len(ctx.deficit.layers)):
        for c, spec in enumerate(ctx.deficit.specs):
            if basis == "features":
                m = ctx.deficit.matrix(l, c)
            else:
                m = torch.cat([b.us for b in ctx.patch.factors[l][c]], dim=1)
            plane = pooled(m.abs(), tokens, features).cpu()
            nt, nf = plane.shape
            for i in range(nt):
                for j in range(nf):
                    out.append({"layer": l, "channel": spec.name, "role": role(spec), "basis": basis,
                                "token_bin": i, "feature_bin": j, "n_token_bins": nt, "n_feature_bins": nf,
                                "quantity": "mean_abs", "value": float(plane[i, j])})
    return out
