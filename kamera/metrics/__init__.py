"""Metrics shared by every arm and table: KL, η, flip-recover, accuracy, e90/n_B, bootstrap CIs."""

from kamera.metrics.divergence import (
    ETA_FLOOR,
    accuracy,
    choice_argmax,
    eta,
    flip_recover,
    flipped,
    kl,
    predicted_letter,
    recovered,
)
from kamera.metrics.rank import e90_over_nb, energy_rank
from kamera.metrics.stats import bootstrap_ci, paired_bootstrap_ci

__all__ = [
    "ETA_FLOOR",
    "accuracy",
    "bootstrap_ci",
    "choice_argmax",
    "e90_over_nb",
    "energy_rank",
    "eta",
    "flip_recover",
    "flipped",
    "kl",
    "paired_bootstrap_ci",
    "predicted_letter",
    "recovered",
]
