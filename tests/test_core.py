"""The operator as pure tensor math: R(δ), Δ, the SVD patch, orbit mean, bytes — on random tensors."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from kamera.core import (
    ChannelSpec,
    ChunkKV,
    Deficit,
    Patch,
    RotarySpec,
    concat,
    deepest,
    deficit,
    orbit_mean,
    relocate,
    rotate,
    singular_values,
)

GEN = torch.Generator().manual_seed(0)


def rotary(layout: str = "half", dim: int = 16, rotary_dim: int | None = None) -> RotarySpec:
    rd = rotary_dim or dim
    inv = 1.0 / (10000 ** (torch.arange(0, rd, 2, dtype=torch.float32) / rd))
    return RotarySpec(layout, inv, rd)


def chunk(n: int = 12, layers: int = 3, layout: str = "half", dtype=torch.float32, mrope: bool = False) -> ChunkKV:
    specs = (ChannelSpec("k", 2, 16, rotary(layout)), ChannelSpec("v", 2, 16))
    data = [tuple(torch.randn(n, 2, 16, generator=GEN).to(dtype) for _ in specs) for _ in range(layers)]
    pos = torch.arange(n)[None].repeat(3 if mrope else 1, 1)
    return ChunkKV(specs, data, pos)


def dense_rotation(spec: RotarySpec, delta: float) -> torch.Tensor:
    """R(δ) as an explicit float64 matrix, built pair by pair from the layout's definition."""
    d = spec.rotary_dim
    r = torch.eye(d, dtype=torch.float64)
    for i, f in enumerate(spec.inv_freq.double()):
        a, b = (i, i + d // 2) if spec.layout == "half" else (2 * i, 2 * i + 1)
        c, s = math.cos(delta * f), math.sin(delta * f)
        r[a, a], r[a, b], r[b, a], r[b, b] = c, -s, s, c
    return r


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotate_matches_pairwise_definition(layout):
    spec = rotary(layout)
    x = torch.randn(5, 16, generator=GEN, dtype=torch.float64)
    ref = x @ dense_rotation(spec, 37.0).T
    torch.testing.assert_close(rotate(x, 37, spec), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rotation_composes_and_inverts(layout):
    spec = rotary(layout)
    x = torch.randn(7, 2, 16, generator=GEN, dtype=torch.float64)
    torch.testing.assert_close(rotate(rotate(x, 1234, spec), 766, spec), rotate(x, 2000, spec), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rotate(rotate(x, 3000, spec), -3000, spec), x, rtol=1e-12, atol=1e-12)
    assert torch.equal(rotate(x, 0, spec), x)


def test_layouts_differ_only_by_a_permutation():
    x = torch.randn(4, 16, generator=GEN, dtype=torch.float64)
    perm = torch.cat([torch.arange(0, 16, 2), torch.arange(1, 16, 2)])  # interleaved → half
    out_i = rotate(x, 11, rotary("interleaved"))
    out_h = rotate(x[:, perm], 11, rotary("half"))
    torch.testing.assert_close(out_i[:, perm], out_h, rtol=1e-12, atol=1e-12)


def test_partial_rotary_leaves_the_tail():
    spec = rotary("half", dim=16, rotary_dim=8)
    x = torch.randn(3, 16, generator=GEN)
    out = rotate(x, 5, spec)
    assert torch.equal(out[:, 8:], x[:, 8:])
    assert not torch.allclose(out[:, :8], x[:, :8])


def test_rotate_rejects_bad_specs():
    with pytest.raises(ValueError, match="layout"):
        RotarySpec("spiral", torch.ones(4), 8)
    with pytest.raises(ValueError, match="rotary_dim"):
        RotarySpec("half", torch.ones(4), 6)
    with pytest.raises(ValueError, match="smaller than rotary_dim"):
        rotate(torch.randn(2, 4), 1, rotary("half", dim=16))


def test_relocate_rotates_only_rotary_channels_and_moves_positions():
    c = chunk(mrope=True)
    r = relocate(c, 40)
    for lc, lr in zip(c.layers, r.layers, strict=True):
        assert lr[1] is lc[1]  # content channel: the very same tensor, never rotated
        torch.testing.assert_close(lr[0], rotate(lc[0], 40, c.specs[0].rotary))
    assert torch.equal(r.positions, c.positions + 40)


def test_chunk_validates_shapes_and_slices():
    c = chunk()
    with pytest.raises(ValueError, match="expected"):
        ChunkKV(c.specs, [(c.layers[0][0][:3], c.layers[0][1])], c.positions)
    with pytest.raises(ValueError, match="channels"):
        ChunkKV(c.specs, [(c.layers[0][0],)], c.positions)
    both = concat([c.slice(0, 5), c.slice(5, 12)])
    assert all(
        torch.equal(a, b) for la, lb in zip(both.layers, c.layers, strict=True) for a, b in zip(la, lb, strict=True)
    )
    assert c.nbytes() == 3 * 2 * 12 * 32 * 4


def deficit_pair(n=12, layers=3, mrope=False):
    base = chunk(n, layers, mrope=mrope)
    cond = base.with_layers([tuple(t + 0.1 * torch.randn(t.shape, generator=GEN) for t in lc) for lc in base.layers])
    return cond, base, deficit(cond, base)


def test_deficit_requires_the_same_frame():
    cond, base, _ = deficit_pair()
    with pytest.raises(ValueError, match="relocate it by δ"):
        deficit(cond, relocate(base, 3))
    with pytest.raises(ValueError, match="tokens"):
        deficit(cond, base.slice(0, 4))


def test_full_rank_patch_reconstructs_and_rank_zero_is_blind():
    cond, base, delta = deficit_pair()
    patch = Patch.form(delta)
    full = patch.apply(base)
    for lf, lc in zip(full.layers, cond.layers, strict=True):
        for a, b in zip(lf, lc, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    zero = patch.truncate(0).apply(base)
    assert all(a is b for lz, lb in zip(zero.layers, base.layers, strict=True) for a, b in zip(lz, lb, strict=True))


def test_truncation_is_eckart_young_without_redecomposing():
    cond, base, delta = deficit_pair(n=20)
    patch = Patch.form(delta)
    sv = singular_values(delta)
    for m in (1, 3, 7):
        approx = patch.truncate(m).apply(base)
        for l in range(3):
            for c, spec in enumerate(base.specs):
                resid = (cond.layers[l][c] - approx.layers[l][c]).reshape(20, -1)
                tail = float((sv[(l, spec.name)][m:] ** 2).sum())
                assert float(resid.double().pow(2).sum()) == pytest.approx(tail, rel=1e-4, abs=1e-9)
    # the factors are shared, never recomputed
    assert patch.truncate(3).factors is patch.factors


def test_energy_captured_is_monotone_in_rank():
    _, _, delta = deficit_pair(n=20)
    patch = Patch.form(delta)
    prev = -1.0
    for m in range(0, 21):
        e = min(patch.truncate(m).energy_captured().values())
        assert e >= prev - 1e-12
        prev = e
    assert prev == pytest.approx(1.0)


def test_rank_clamp_warns_once_and_negative_rank_is_an_error(caplog):
    _, _, delta = deficit_pair(n=12)
    patch = Patch.form(delta)
    assert patch.full_rank == 12  # min(n_B = 12, width = 32)
    with caplog.at_level(logging.WARNING, logger="kamera.core.patch"):
        p = patch.truncate(500)
        patch.truncate(500)
    assert p.effective_rank == 12
    assert sum("clamped" in r.message for r in caplog.records) == 1
    with pytest.raises(ValueError, match="≥ 0"):
        patch.truncate(-1)
    with pytest.raises(TypeError):
        patch.truncate(2.5)


def test_patch_bytes_are_m_times_n_plus_width_per_layer_channel():
    n, layers = 12, 3
    _, base, delta = deficit_pair(n=n, layers=layers)
    for dtype, item in ((torch.float32, 4), (torch.bfloat16, 2)):
        patch = Patch.form(delta, dtype=dtype)
        for m in (1, 4, 8):
            assert patch.truncate(m).nbytes() == layers * 2 * m * (n + 32) * item
        assert patch.truncate(4).restrict([2]).nbytes() == 1 * 2 * 4 * (n + 32) * item
    patch = Patch.form(delta)
    assert patch.truncate(4).bytes_fraction(base) == pytest.approx(3 * 2 * 4 * (12 + 32) / (3 * 2 * 12 * 32))
    heads = Patch.form(delta, granularity="head")
    assert heads.truncate(4).nbytes() == layers * 2 * 2 * 4 * (n + 16) * 4


def test_head_granularity_full_rank_reconstructs():
    cond, base, delta = deficit_pair()
    full = Patch.form(delta, granularity="head").apply(base)
    torch.testing.assert_close(full.layers[1][0], cond.layers[1][0], rtol=0, atol=1e-6)


def test_restrict_patches_only_the_chosen_layers():
    cond, base, delta = deficit_pair()
    out = Patch.form(delta).restrict(deepest(3)).apply(base)
    assert deepest(3) == [1, 2] and deepest(4) == [2, 3] and deepest(28) == list(range(14, 28))
    assert out.layers[0][0] is base.layers[0][0]
    torch.testing.assert_close(out.layers[2][1], cond.layers[2][1], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        Patch.form(delta).restrict([7])


def test_relocating_a_patch_equals_forming_it_on_rotated_kv():
    cond, base, delta = deficit_pair(n=16)
    d = 250
    moved = Patch.form(delta).truncate(5).relocate(d)
    direct = Patch.form(deficit(relocate(cond, d), relocate(base, d))).truncate(5)
    a, b = moved.apply(relocate(base, d)), direct.apply(relocate(base, d))
    for la, lb in zip(a.layers, b.layers, strict=True):
        torch.testing.assert_close(la[0], lb[0], rtol=0, atol=1e-5)
        torch.testing.assert_close(la[1], lb[1], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="different positions"):
        moved.apply(base)


def test_orbit_mean_of_one_ordering_is_that_ordering():
    *_, delta = deficit_pair()
    mean = orbit_mean([delta])
    assert all(
        torch.equal(a, b) for la, lb in zip(mean.layers, delta.layers, strict=True) for a, b in zip(la, lb, strict=True)
    )
    other = Deficit(delta.specs, [tuple(2 * t for t in lc) for lc in delta.layers], delta.positions)
    torch.testing.assert_close(orbit_mean([delta, other]).layers[0][0], 1.5 * delta.layers[0][0])
    with pytest.raises(ValueError, match="at least one"):
        orbit_mean([])
