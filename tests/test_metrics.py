"""Metrics as EXPERIMENTS.md defines them: KL, η with its floor, flip / recover, e90, bootstrap CIs."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from kamera.core import ChannelSpec, ChunkKV, Patch, RotarySpec, deficit
from kamera.errors import ItemError
from kamera.metrics import (
    NonFiniteError,
    accuracy,
    bf16_ulps,
    bf16_vector_ulps,
    bootstrap_ci,
    e90_columns,
    energy_rank,
    eta,
    flip_recover,
    flipped,
    kl,
    median_ci,
    paired_bootstrap_ci,
    predicted_letter,
    recovered,
    rounding_floor,
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


def test_kl_raises_on_non_finite_logits_naming_the_comparison():
    p = torch.randn(50, generator=torch.Generator().manual_seed(1))
    for bad, count in ((math.nan, "1 NaN"), (math.inf, "1 +inf"), (-math.inf, "1 -inf")):
        q = p.clone()
        q[7] = bad
        with pytest.raises(NonFiniteError, match=f"re-prefill ‖ patch_r16, item x1.*second.*{re.escape(count)}"):
            kl(p, q, what="re-prefill ‖ patch_r16, item x1")
        with pytest.raises(ItemError, match="first"):  # an ItemError: the runner records the item as failed
            kl(q.bfloat16(), p)
    assert issubclass(NonFiniteError, ItemError)


def test_eta_refuses_non_finite_kls():
    for arm, blind in ((math.nan, 1.0), (0.1, math.nan), (math.inf, 1.0), (0.1, math.inf)):
        with pytest.raises(NonFiniteError, match="η of patch_r8"):
            eta(arm, blind, what="η of patch_r8")


# ----- e90/n_B -------------------------------------------------------------------------------------
def test_energy_rank():
    s = torch.tensor([3.0, 1.0, 1.0, 0.0])  # energies 9, 1, 1: 9/11 = 0.82 < 0.9 ≤ 10/11
    assert energy_rank(s) == 2
    assert energy_rank(torch.zeros(4)) == 0
    assert energy_rank(torch.tensor([1.0, 1.0]), 1.0) == 2
    with pytest.raises(ValueError, match="fraction"):
        energy_rank(s, 0.0)


N, HEADS, DIM = 32, 2, 16  # n_B = 32, width 32 per channel
GEN = torch.Generator().manual_seed(5)
SPECS = (
    ChannelSpec("k", HEADS, DIM, RotarySpec("half", 1.0 / 10000 ** (torch.arange(0, DIM, 2) / DIM), DIM)),
    ChannelSpec("v", HEADS, DIM),
)


def exact_rank(r: int) -> torch.Tensor:
    """An [N, HEADS, DIM] matrix of rank r with r equal singular values: e90 = ⌈0.9·r⌉ exactly."""
    q1, _ = torch.linalg.qr(torch.randn(N, r, generator=GEN, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(HEADS * DIM, r, generator=GEN, dtype=torch.float64))
    return (3.0 * q1 @ q2.T).float().reshape(N, HEADS, DIM)


def one_ulp_noise(t: torch.Tensor) -> torch.Tensor:
    """t moved by one ulp of its dtype on about half its entries: a rounding-level Δ (full rank)."""
    up = torch.nextafter(t, torch.full_like(t, math.inf))
    return torch.where(torch.rand(t.shape, generator=GEN) < 0.5, up, t)


def deficit_case(layers: list[tuple[str | int, str | int]], dtype=torch.float32) -> tuple[Patch, ChunkKV]:
    """Layers given as (K, V) deficits: an int r is an exact rank-r Δ, "noise" a one-ulp Δ, "zero" none."""
    base_layers, cond_layers = [], []
    for spec_k_v in layers:
        base = tuple(torch.randn(N, HEADS, DIM, generator=GEN).to(dtype) for _ in SPECS)
        cond = []
        for t, what in zip(base, spec_k_v, strict=True):
            if what == "noise":
                cond.append(one_ulp_noise(t))
            elif what == "zero":
                cond.append(t.clone())
            else:
                cond.append((t.float() + exact_rank(what)).to(dtype))
        base_layers.append(base)
        cond_layers.append(tuple(cond))
    pos = torch.arange(N)
    base, cond = ChunkKV(SPECS, base_layers, pos), ChunkKV(SPECS, cond_layers, pos)
    return Patch.form(deficit(cond, base), dtype=dtype), cond


def test_e90_per_channel_when_k_is_lower_rank_than_v():
    """Layer 1: K of rank 2, V of rank 6; layer 0 is rounding noise on K and exactly zero on V (as in a model).

    The old single number (mean over every layer and both channels, layer 0 included) mixes the
    two channels with the noise: it reads above V although K is the lower-rank channel. Per
    channel, V reads 6 / 32 and K 2 / 32 exactly."""
    patch, cond = deficit_case([("noise", "zero"), (2, 6)])
    cols = e90_columns(patch, cond)
    assert cols == {"e90_nb_content": 6 / N, "e90_nb_rotary": 2 / N}
    ranks = [energy_rank(b[0].s) for chans in patch.factors for b in chans if float(b[0].s.sum()) > 0]
    mixed = sum(ranks) / len(ranks) / N
    assert energy_rank(patch.factors[0][0][0].s) > 6  # the layer-0 noise is spread over many directions
    assert cols["e90_nb_rotary"] < cols["e90_nb_content"] <= mixed


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_e90_excludes_rounding_noise_and_keeps_a_real_deficit(dtype):
    """Two layers, so the median would show layer 0 if it were counted."""
    patch, cond = deficit_case([("noise", "noise"), (3, 5)], dtype)
    assert e90_columns(patch, cond) == {"e90_nb_content": 5 / N, "e90_nb_rotary": 3 / N}
    patch, cond = deficit_case([(1, 1), (3, 5)], dtype)  # a real rank-1 deficit at layer 0 counts
    assert e90_columns(patch, cond) == {"e90_nb_content": (1 + 5) / 2 / N, "e90_nb_rotary": (1 + 3) / 2 / N}
    eps = torch.finfo(dtype).eps
    assert rounding_floor(cond, 1) == 4 * eps
    assert rounding_floor(cond, 0) == pytest.approx(4 * eps + torch.finfo(torch.float32).eps * (N - 1))


def test_e90_of_a_zero_deficit_is_zero_and_bad_inputs_raise():
    patch, cond = deficit_case([("zero", "zero"), ("zero", "zero")])
    assert e90_columns(patch, cond) == {"e90_nb_content": 0.0, "e90_nb_rotary": 0.0}
    heads = Patch(patch.specs, patch.factors, patch.positions, granularity="head")
    with pytest.raises(ValueError, match="'layer' granularity"):
        e90_columns(heads, cond)
    with pytest.raises(ValueError, match="same chunk"):
        e90_columns(patch, cond.slice(0, 4))


def test_bootstrap_is_seeded_and_brackets_the_mean():
    x = np.random.default_rng(0).normal(1.0, 1.0, 200)
    a, b = bootstrap_ci(x, seed=3), bootstrap_ci(x, seed=3)
    assert a == b and a[1] < a[0] < a[2] and a[1] < 1.0 < a[2]
    assert bootstrap_ci([math.nan, 1.0, 1.0])[0] == 1.0
    assert all(math.isnan(v) for v in bootstrap_ci([]))


def test_cluster_bootstrap_with_one_item_per_cluster_is_the_item_bootstrap():
    x = np.random.default_rng(2).normal(0.0, 1.0, 80)
    labels = [f"video-{i}" for i in np.random.default_rng(3).permutation(80)]  # unique, in any order
    assert bootstrap_ci(x, clusters=labels, seed=4) == bootstrap_ci(x, seed=4)
    assert median_ci(x, clusters=labels) == median_ci(x) == bootstrap_ci(x, np.median)
    assert paired_bootstrap_ci(x, x / 2, clusters=labels) == paired_bootstrap_ci(x, x / 2)


def test_cluster_bootstrap_widens_the_interval_when_items_share_a_cluster():
    """20 videos × 10 questions: a shared per-video effect (sd 1) dominates the per-question noise (sd 0.1)."""
    rng = np.random.default_rng(5)
    video = np.repeat(np.arange(20), 10)
    x = rng.normal(0.0, 1.0, 20)[video] + rng.normal(0.0, 0.1, 200)
    _, lo_i, hi_i = bootstrap_ci(x)
    point, lo_c, hi_c = bootstrap_ci(x, clusters=video.tolist())
    assert point == pytest.approx(x.mean()) and lo_c < point < hi_c
    assert hi_c - lo_c > 2.0 * (hi_i - lo_i)  # ≈ √10 wider: 20 independent units, not 200
    _, lo_m, hi_m = median_ci(x, clusters=video.tolist())
    assert lo_m < np.median(x) < hi_m
    y = x.copy()
    y[:10] = np.nan  # a whole video unmeasured: its label goes with its values
    assert bootstrap_ci(y, clusters=video.tolist())[0] == pytest.approx(np.nanmean(y))
    with pytest.raises(ValueError, match="labels"):
        bootstrap_ci(x, clusters=video[:5].tolist())


def test_paired_bootstrap_resamples_items_jointly():
    rng = np.random.default_rng(1)
    base = rng.normal(0, 5, 100)  # large item effect shared by both arms
    a, b = base + 0.5, base
    point, lo, hi = paired_bootstrap_ci(a, b)
    assert point == pytest.approx(0.5) and hi - lo < 1e-9  # the item effect cancels exactly
    with pytest.raises(ValueError, match="length"):
        paired_bootstrap_ci([1.0], [1.0, 2.0])


def test_bf16_ulps_count_at_the_element_and_vector_ulps_at_the_vectors_largest_reference():
    ref = torch.tensor([[4.0, 0.0, 1.0], [0.5, 0.25, 0.0]])  # bf16 spacing: 2⁻⁵ at 4, 2⁻⁸ at 0.5
    got = ref + torch.tensor([[2.0**-5, 2.0**-5, 2.0**-7], [2.0**-8, 2.0**-8, 0.0]])
    assert bf16_vector_ulps(got, ref).tolist() == [[1.0, 1.0, 0.25], [1.0, 1.0, 0.0]]
    assert bf16_ulps(got, ref)[0, 2] == 1.0 and bf16_ulps(got, ref)[1, 1] == 2.0  # each at its own spacing
    assert bf16_ulps(got, ref)[0, 1] > 1e30  # an exact-zero reference has no spacing of its own
