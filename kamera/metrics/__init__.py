"""Metrics shared by every arm and table: KL, η, flip-recover, accuracy, e90/n_B, bootstrap CIs, bf16 ULPs."""

from kamera.metrics.divergence import (
    ETA_FLOOR,
    SAFE_MARGIN,
    NonFiniteError,
    accuracy,
    choice_argmax,
    eta,
    flip_recover,
    flipped,
    kl,
    predicted_letter,
    recovered,
    reuse_gate,
    transfer_safe,
)
from kamera.metrics.rank import (
    E90_COLUMNS,
    PLATEAU_SHARE,
    above_rounding,
    e90_columns,
    energy_rank,
    gap_closed,
    plateau_rank,
    rounding_floor,
)
from kamera.metrics.stats import bootstrap_ci, bootstrap_draws, median_ci, paired_bootstrap_ci
from kamera.metrics.ulp import bf16_ulps, bf16_vector_ulps

# The row metrics' code version (KL, η, flip / recover, accuracy, e90 / n_B as rows store them): every row and
# probe record carries it (``metrics_version``) beside its plugin's ``version``; bump it when a change here
# changes a stored number, and every job recomputes its rows on its next run (docs/identity.md).
VERSION = 1

__all__ = [
    "E90_COLUMNS",
    "ETA_FLOOR",
    "PLATEAU_SHARE",
    "SAFE_MARGIN",
    "VERSION",
    "NonFiniteError",
    "above_rounding",
    "accuracy",
    "bf16_ulps",
    "bf16_vector_ulps",
    "bootstrap_ci",
    "bootstrap_draws",
    "choice_argmax",
    "e90_columns",
    "energy_rank",
    "eta",
    "flip_recover",
    "flipped",
    "gap_closed",
    "kl",
    "median_ci",
    "paired_bootstrap_ci",
    "plateau_rank",
    "predicted_letter",
    "recovered",
    "reuse_gate",
    "rounding_floor",
    "transfer_safe",
]
