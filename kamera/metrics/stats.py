"""Seeded percentile bootstrap over items, plain and paired (arms compared on shared item ids)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


def _clean(values: Sequence[float]) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    return a[~np.isnan(a)]


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[[np.ndarray], float] = np.mean,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(statistic, low, high): percentile bootstrap over items, NaNs dropped; NaNs if no items remain."""
    a = _clean(values)
    if a.size == 0:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(n_boot, a.size))
    boots = np.apply_along_axis(stat, 1, a[idx])
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return (float(stat(a)), float(lo), float(hi))


def paired_bootstrap_ci(
    a: Sequence[float],
    b: Sequence[float],
    stat: Callable[[np.ndarray], float] = np.mean,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float, float]:
    """CI of stat(a − b) resampling items jointly (a[i], b[i] measured on the same item)."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    return bootstrap_ci(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64), stat, n_boot, alpha, seed)
