"""Seeded percentile bootstrap over items or clusters of items, plain and paired (arms on shared item ids).

Items that share a ``cluster_key`` (several questions on one video or one document) are not
independent: resampling them one by one understates the spread. With ``clusters`` the bootstrap
draws whole clusters with replacement (every item of a drawn cluster comes along), the cluster
bootstrap; with one item per cluster it is exactly the item bootstrap, draw for draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np

CI = tuple[float, float, float]


def _groups(clusters: Sequence[Hashable] | None) -> list[np.ndarray] | None:
    """Item indices per cluster in order of first appearance (None: every item its own cluster)."""
    if clusters is None:
        return None
    members: dict[Hashable, list[int]] = {}
    for i, c in enumerate(clusters):
        members.setdefault(c, []).append(i)
    if len(members) == len(clusters):
        return None
    return [np.asarray(m) for m in members.values()]


def bootstrap_draws(
    values: Sequence[float],
    stat: Callable[[np.ndarray], float] = np.mean,
    n_boot: int = 2000,
    seed: int = 0,
    clusters: Sequence[Hashable] | None = None,
) -> tuple[float, np.ndarray]:
    """(statistic of ``values``, its ``n_boot`` seeded bootstrap replicates) over items, or over ``clusters``
    (one label per value): the draws :func:`bootstrap_ci` takes percentiles of, for a statistic whose interval
    needs another quantile rule (a selected rank is discrete: :func:`kamera.metrics.plateau_rank`).

    NaN values are dropped (with their labels); (NaN, empty) if no value remains.
    """
    a = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(a)
    if clusters is not None and len(clusters) != a.size:
        raise ValueError(f"clusters has {len(clusters)} labels for {a.size} values")
    a = a[keep]
    if a.size == 0:
        return math.nan, np.empty(0)
    groups = _groups(None if clusters is None else [c for c, k in zip(clusters, keep, strict=True) if k])
    rng = np.random.default_rng(seed)
    if groups is None:
        idx = rng.integers(0, a.size, size=(n_boot, a.size))
        boots = np.apply_along_axis(stat, 1, a[idx])
    else:
        draws = rng.integers(0, len(groups), size=(n_boot, len(groups)))
        boots = np.array([stat(a[np.concatenate([groups[g] for g in row])]) for row in draws])
    return float(stat(a)), boots


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[[np.ndarray], float] = np.mean,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    clusters: Sequence[Hashable] | None = None,
) -> CI:
    """(statistic, low, high): percentile bootstrap over items, or over ``clusters`` (one label per value).

    NaN values are dropped (with their labels); NaNs come back if no value remains.
    """
    value, boots = bootstrap_draws(values, stat, n_boot, seed, clusters)
    if boots.size == 0:
        return (math.nan, math.nan, math.nan)
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return (value, float(lo), float(hi))


def median_ci(values: Sequence[float], clusters: Sequence[Hashable] | None = None, **kwargs) -> CI:
    """(median, low, high): the median with its bootstrap interval (Fig. 5 shows it beside the mean)."""
    return bootstrap_ci(values, np.median, clusters=clusters, **kwargs)


def paired_bootstrap_ci(
    a: Sequence[float],
    b: Sequence[float],
    stat: Callable[[np.ndarray], float] = np.mean,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    clusters: Sequence[Hashable] | None = None,
) -> CI:
    """CI of stat(a − b) resampling items (or their ``clusters``) jointly: a[i], b[i] measured on one item."""
    if len(a) != len(b):
        raise ValueError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return bootstrap_ci(diff, stat, n_boot, alpha, seed, clusters)
