"""Metrics as EXPERIMENTS.md defines them: KL, η with its floor, flip / recover, e90, bootstrap CIs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from kamera.metrics import (
    accuracy,
    bootstrap_ci,
    e90_over_nb,
    energy_rank,
    eta,
    flip_recover,
    flipped,
    kl,
    paired_bootstrap_ci,
    predicted_letter,
    recovered,
)


def test_kl_matches_a_hand_computed_value_and_is_zero_on_itself():
    p = torch.log(torch.tensor([0.5, 0.25, 0.25]))
    q = torch.log(torch.tensor([0.25, 0.5, 0.25]))
    assert kl(p, q) == pytest.approx(0.5 * math.log(2) - 0.25 * math.log(2), abs=1e-7)  # float32 logits
    assert kl(p + 3.0, p) == pytest.approx(0.0, abs=1e-12)  # logits, not probabilities
    with pytest.raises(ValueError, match="shapes"):
        kl(p, q[:2])


def test_kl_reads_bf16_logits_in_float32():
    p = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    assert kl(p.bfloat16(), p.bfloat16()) == 0.0
    assert kl(p, p.bfloat16()) > 0.0


def test_eta_counts_only_measurable_deficits():
    assert eta(0.0, 1.0) == 1.0
    assert eta(2.0, 1.0) == -1.0  # an arm can be worse than blind
    assert math.isnan(eta(0.0, 1e-4))  # at the floor: not measurable
    assert eta(0.5e-3, 1e-3, floor=1e-5) == pytest.approx(0.5)


def test_flip_and_recover_over_choice_letters():
    ref = torch.tensor([0.0, 5.0, 1.0, 0.0, 9.0])  # token 4 is outside the choices
    blind = torch.tensor([3.0, 1.0, 1.0, 0.0, 9.0])
    arm = torch.tensor([0.0, 2.0, 1.0, 0.0, 0.0])
    choices = [0, 1, 2]
    assert flipped(blind, ref, choices) and not flipped(blind, ref)  # full-vocab argmax agrees (token 4)
    assert recovered(arm, ref, choices)
    assert predicted_letter(arm, choices, "ABC") == "B"
    assert flip_recover([True, True, False], [True, False, False]) == 0.5
    assert math.isnan(flip_recover([False], [True]))
    assert accuracy([True, False, True, True]) == 0.75 and math.isnan(accuracy([]))


def test_energy_rank_and_e90_over_nb():
    s = torch.tensor([3.0, 1.0, 1.0, 0.0])  # energies 9, 1, 1: 9/11 = 0.82 < 0.9 ≤ 10/11
    assert energy_rank(s) == 2
    assert energy_rank(torch.zeros(4)) == 0
    assert energy_rank(torch.tensor([1.0, 1.0]), 1.0) == 2
    sv = {(0, "k"): s, (0, "v"): torch.tensor([1.0, 0.0, 0.0, 0.0]), (1, "k"): torch.zeros(4)}
    assert e90_over_nb(sv, n_b=4) == pytest.approx((2 + 1) / 2 / 4)


def test_bootstrap_is_seeded_and_brackets_the_mean():
    x = np.random.default_rng(0).normal(1.0, 1.0, 200)
    a, b = bootstrap_ci(x, seed=3), bootstrap_ci(x, seed=3)
    assert a == b and a[1] < a[0] < a[2] and a[1] < 1.0 < a[2]
    assert bootstrap_ci([math.nan, 1.0, 1.0])[0] == 1.0
    assert all(math.isnan(v) for v in bootstrap_ci([]))


def test_paired_bootstrap_resamples_items_jointly():
    rng = np.random.default_rng(1)
    base = rng.normal(0, 5, 100)  # large item effect shared by both arms
    a, b = base + 0.5, base
    point, lo, hi = paired_bootstrap_ci(a, b)
    assert point == pytest.approx(0.5) and hi - lo < 1e-9  # the item effect cancels exactly
    with pytest.raises(ValueError, match="length"):
        paired_bootstrap_ci([1.0], [1.0, 2.0])
