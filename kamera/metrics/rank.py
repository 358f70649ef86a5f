"""Rank structure of the deficit: e90 (directions for 90% of Δ's energy) and e90/n_B."""

from __future__ import annotations

import math

import torch


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


def e90_over_nb(singular_values: dict, n_b: int, fraction: float = 0.9) -> float:
    """Mean over layer-channels with a nonzero deficit of e90 / n_B (Table 7, Fig. 9a)."""
    ranks = [energy_rank(s, fraction) for s in singular_values.values() if float(s.abs().sum()) > 0]
    return math.nan if not ranks else sum(ranks) / len(ranks) / n_b
