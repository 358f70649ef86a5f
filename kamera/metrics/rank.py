"""Rank structure of the deficit: e90 (directions for 90% of Δ's energy) and e90/n_B per channel.

The paper reports "e90/n_B ≤ 0.30 on V, lower still on GQA's K" (Table 7; Fig. 9a plots the same
quantity per model). So e90/n_B is a per-channel number, read on each family's two channels:

- content: V on GQA / MHA, the latent c_KV on MLA → ``e90_nb_content`` (the paper's "on V"; Table 7
  and Fig. 9 use this column);
- rotary: K on GQA / MHA, the decoupled k_pe on MLA → ``e90_nb_rotary`` (the paper's "on GQA's K").

Per layer l and channel c, e90 is the number of singular directions of the n_B × width matrix Δ_lc
that hold 90% of ‖Δ_lc‖². A layer-channel counts only where its deficit is above rounding,
‖Δ_lc‖_F > τ_c·‖KV(B|A)_lc‖_F with

    τ_c = 4·eps(dtype)  (+ eps(float32)·max|position of B|  on a rotary channel)

eps(dtype) being the machine epsilon of the cache's dtype. The first term is the storage rounding
of two computations of one tensor (each differs from the truth by ≤ eps/2 per entry); the second
bounds the model's own float32 RoPE angle rounding (p·θ formed in float32, θ_0 = 1), which moves a
rotary channel by up to that much relative to an exact relocation. Below τ_c, Δ is rounding noise,
whose e90 says nothing about conditioning and is high (noise is spread over every direction):
layer 0 is the case, since its KV depends on each token and its position alone, so Δ_0 is only
rounding (2e-7 relative on K in float32, 4e-3 in bf16; exactly 0 on V). The channel's value is the
median of e90_lc / n_B over its layers above rounding (median, not mean: a few outlying layers do
not move it), and 0.0 when no layer is above rounding (no direction is needed to hold a deficit
that is not there, so Δ = 0 gives a defined value).
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import torch

from kamera.core import ChunkKV, Patch

E90_COLUMNS = ("e90_nb_content", "e90_nb_rotary")
ROUNDING_EPS = 4  # τ's storage term, in machine epsilons of the cache dtype


def energy_rank(singular_values: torch.Tensor, fraction: float = 0.9) -> int:
    """Smallest k whose top-k singular directions hold ``fraction`` of ‖Δ‖² (0 for Δ = 0)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    e = singular_values.double() ** 2
    total = float(e.sum())
    if total == 0:
        return 0
    cum = torch.cumsum(e, 0) / total
    return int((cum < fraction - 1e-12).sum()) + 1


def rounding_floor(conditioned: ChunkKV, channel: int) -> float:
    """τ_c: the relative ‖Δ‖ below which channel ``channel``'s deficit is rounding (module docstring)."""
    tau = ROUNDING_EPS * torch.finfo(conditioned.dtype).eps
    if conditioned.specs[channel].rotary is not None:
        tau += torch.finfo(torch.float32).eps * float(conditioned.positions.abs().max())
    return tau


def above_rounding(singular_values: torch.Tensor, conditioned: ChunkKV, layer: int, channel: int) -> bool:
    """Whether the Δ of (``layer``, ``channel``), given by its singular values, counts: ‖Δ_lc‖_F > τ_c·‖KV(B|A)_lc‖_F.

    The one layer rule of every e90 summary (``e90_columns``, Fig. 3's energy records): below it Δ is rounding
    (layer 0 is the case) and its e90 says nothing about conditioning (module docstring)."""
    delta = math.sqrt(float((singular_values.double() ** 2).sum()))
    return delta > rounding_floor(conditioned, channel) * float(conditioned.layers[layer][channel].double().norm())


def e90_columns(patch: Patch, conditioned: ChunkKV, fraction: float = 0.9) -> dict[str, float]:
    """The row's ``e90_nb_content`` and ``e90_nb_rotary`` for one item (median over layers above rounding).

    ``patch`` is the item's full layer-granularity patch (its singular values are reused, no new
    SVD); ``conditioned`` is KV(B|A), whose per-layer norm and dtype set the rounding floor. A role
    with no channel in this family's layout gets NaN.
    """
    if patch.granularity != "layer":
        raise ValueError("e90 is defined on each layer-channel's n_B × width Δ: pass the 'layer' granularity patch")
    if patch.n_tokens != conditioned.n_tokens or [s.name for s in patch.specs] != [s.name for s in conditioned.specs]:
        raise ValueError("the patch and the conditioned KV are not of the same chunk")
    per_role: dict[str, list[float] | None] = dict.fromkeys(E90_COLUMNS)
    for c, spec in enumerate(patch.specs):
        column = E90_COLUMNS[spec.rotary is not None]
        values = per_role[column] = per_role[column] or []
        for l, chans in enumerate(patch.factors):
            s = chans[c][0].s
            if above_rounding(s, conditioned, l, c):
                values.append(energy_rank(s, fraction) / patch.n_tokens)
    return {
        column: math.nan if values is None else (statistics.median(values) if values else 0.0)
        for column, values in per_role.items()
    }


PLATEAU_SHARE = 0.9  # the share of the blind → reference gap a rank must close to be the plateau


def gap_closed(kl_rank: float, kl_blind: float, kl_ref: float) -> float:
    """(KL_blind − KL_m) / (KL_blind − KL_ref): the share of the gap between blind reuse and the reference patch
    that the rank-m patch closes (App. C.2: "rank-32 closes 94% of the KL gap to the rank-64 floor"); NaN where
    the reference closes no gap."""
    gap = kl_blind - kl_ref
    return (kl_blind - kl_rank) / gap if gap > 0 else math.nan


def plateau_rank(ranks: list[int], kl: np.ndarray, kl_blind: np.ndarray, ref: int,
                 share: float = PLATEAU_SHARE) -> float:
    """The plateau: the smallest rank m of ``ranks`` whose mean KL closes at least ``share`` of the gap between
    blind reuse's mean KL and the rank-``ref`` patch's (:func:`gap_closed`), over the items of ``kl`` (items ×
    ranks, columns in the order of ``ranks``) and ``kl_blind`` (per item). NaN where the reference closes no gap.

    A selection rule on the mean curve (App. C.2 selects "the same plateau" on a held-out split and bootstraps
    it, "95% CI [32, 128]"): rerun on resampled or held-out items, it gives the interval of the selected rank."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1], got {share}")
    if list(ranks) != sorted(ranks) or ref not in ranks:
        raise ValueError(f"ranks must be ascending and hold the reference rank {ref}, got {list(ranks)}")
    kl, kl_blind = np.asarray(kl, dtype=np.float64), np.asarray(kl_blind, dtype=np.float64)
    if kl.ndim != 2 or kl.shape != (kl_blind.size, len(ranks)):
        raise ValueError(f"kl must be items × ranks ({kl_blind.size} × {len(ranks)}), got {kl.shape}")
    means, blind = kl.mean(axis=0), float(kl_blind.mean())
    closed = [gap_closed(k, blind, means[ranks.index(ref)]) for k in means]
    return next((float(m) for m, c in zip(ranks, closed, strict=True) if c >= share), math.nan)
