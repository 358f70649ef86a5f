"""Figs. 3 and 8: energy vs rank, relative deficit norms, landmark keys, depth planes.

Known structure: on the toy binding model Δ vanishes at layer 0 (a layer's K/V depend only on the
hidden state entering it, and layer 0's is the embedding) and is large at layer 1; the full-rank
patch captures all of every layer's energy; with δ = 0 the position confound vanishes and the
4D-mask oracle equals the canonical; landmark masses are the conditioned forward's own attention.
"""

from __future__ import annotations

import pytest
import torch
from diag_support import context, toy_contexts
from tinyfamilies import TINY

from kamera.arms.cross_mass import a_columns
from kamera.diagnostics import deficit_norms, depth_planes, energy_curve, landmark_keys
from kamera.diagnostics.energy import default_ranks
from kamera.diagnostics.landmarks import a_key_mass
from kamera.diagnostics.planes import pooled
from kamera.items.spans import Span
from kamera.models.base import place
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import eager_attention


def by(records: list[dict], *keys: str) -> dict:
    """{(record[k] for k in keys): value}, failing on a repeated key."""
    out = {}
    for r in records:
        k = tuple(r[x] for x in keys)
        assert k not in out, k
        out[k] = r["value"]
    return out


# ----- the toy model: known structure ---------------------------------------------------------
def test_toy_deficit_vanishes_at_layer_0_and_is_large_at_layer_1():
    for ctx in toy_contexts():
        norms = by(deficit_norms(ctx), "layer", "channel", "quantity")
        for ch in ("k", "v"):
            assert norms[(0, ch, "conditioning")] <= 1e-6
            assert norms[(1, ch, "conditioning")] >= 1e-2
        planes = by(depth_planes(ctx), "layer", "channel", "token_bin", "feature_bin")
        deep = max(v for (l, *_), v in planes.items() if l == 1)
        assert max(v for (l, *_), v in planes.items() if l == 0) <= 1e-6 * deep


def test_toy_full_rank_energy_is_one_on_every_layer():
    ctx = toy_contexts()[0]
    full = ctx.patch.full_rank
    curve = by(energy_curve(ctx), "layer", "channel", "quantity", "rank")
    for l in range(2):
        for ch in ("k", "v"):
            assert curve[(l, ch, "energy_captured", full)] == 1.0


# ----- Fig. 3(a) -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_energy_curve_is_monotone_and_exactly_one_at_full_rank(tiny, name):
    ctx = context(tiny, name)
    records = energy_curve(ctx)
    assert {tuple(sorted(r)) for r in records} == {("channel", "layer", "quantity", "rank", "role", "value")}
    ranks = default_ranks(ctx.patch.full_rank)
    curve = by(records, "layer", "channel", "quantity", "rank")
    for l in range(ctx.adapter.n_layers):
        for spec in ctx.adapter.specs:
            values = [curve[(l, spec.name, "energy_captured", m)] for m in ranks]
            assert all(0.0 <= v <= 1.0 for v in values)
            assert values == sorted(values) and values[-1] == 1.0
            e90 = int(curve[(l, spec.name, "e90_rank", None)])
            zero = not bool(ctx.deficit.matrix(l, ctx.adapter.specs.index(spec)).any())
            assert (e90 == 0) == zero and e90 <= min(ctx.n_b, spec.width)
            if e90 > 1:  # the e90 rank is where the curve first reaches 0.9
                exact = by(energy_curve(ctx, [e90 - 1, e90]), "layer", "channel", "quantity", "rank")
                assert exact[(l, spec.name, "energy_captured", e90 - 1)] < 0.9
                assert exact[(l, spec.name, "energy_captured", e90)] >= 0.9 - 1e-12


def test_energy_curve_rejects_bad_ranks(tiny):
    ctx = context(tiny, "tiny_llava")
    for bad in ([], [0], [2, -1], [1.5], [True]):
        with pytest.raises(ValueError, match="ranks"):
            energy_curve(ctx, bad)
    with pytest.raises(ValueError, match="fraction"):
        energy_curve(ctx, fraction=0.0)


# ----- Fig. 3(b) -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_deficit_norms_split_raw_into_conditioning_and_position(tiny, name):
    ctx = context(tiny, name)
    norms = by(deficit_norms(ctx), "layer", "channel", "quantity")
    for l in range(ctx.adapter.n_layers):
        for spec in ctx.adapter.specs:
            raw, cond, pos = (norms[(l, spec.name, q)] for q in ("raw", "conditioning", "position"))
            assert norms[(l, spec.name, "kv_norm")] > 0
            if spec.rotary is None:  # R(δ) leaves content channels alone
                assert raw == cond and pos == 0.0
            else:  # δ ≠ 0 turns the keys: the unrelocated difference is dominated by position
                assert pos > 0 and raw <= cond + pos + 1e-9
    assert ctx.delta != 0


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi", "tiny_llava"])
def test_deficit_norms_at_native_positions_have_no_position_part(tiny, name):
    """δ = 0: nothing to relocate (position = 0, raw = conditioning), and the 4D-mask oracle is the
    canonical (position_residual ≈ 0, conditioning_a ≈ conditioning)."""
    ctx = context(tiny, name, canonical_context="native")
    assert ctx.delta == 0
    norms = by(deficit_norms(ctx, oracle=True), "layer", "channel", "quantity")
    for (l, ch, q), v in norms.items():
        if q == "position":
            assert v == 0.0
        elif q == "raw":
            assert v == norms[(l, ch, "conditioning")]
        elif q == "position_residual":
            assert v <= 1e-5, (l, ch, v)
        elif q == "conditioning_a":
            assert v == pytest.approx(norms[(l, ch, "conditioning")], abs=1e-5)


# ----- Fig. 3(c) -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi", "tiny_llava"])
def test_landmark_masses_are_the_conditioned_forwards_attention(tiny, name):
    """B's head- and row-mean attention on each A key equals that of one eager forward over [prefix · A · B]."""
    ctx = context(tiny, name)
    adapter = ctx.adapter
    placed = place(ctx.enc.spans[: ctx.b + 1], ctx.offset)
    embeds = torch.cat([s.embeds for s, _ in placed])[None]
    pos = torch.cat([s.local_pos + start for s, start in placed], dim=-1)
    with eager_attention(adapter), torch.no_grad():
        out = adapter.lm(inputs_embeds=embeds, position_ids=adapter.position_ids(pos), output_attentions=True,
                         **adapter._forward_extras(placed))
    a0, a1 = a_columns(ctx)
    b0, b1 = ctx.ranges[ctx.b]
    mass = a_key_mass(ctx)
    assert len(mass) == adapter.n_layers
    for l, att in enumerate(out.attentions):
        torch.testing.assert_close(mass[l], att[0, :, b0:b1, a0:a1].float().mean((0, 1)), atol=1e-5, rtol=1e-4)


def test_landmark_counts_grow_with_the_fraction_and_stay_within_a(tiny):
    ctx = context(tiny, "tiny_qwen3_vl")
    n_a = a_columns(ctx)[1] - a_columns(ctx)[0]
    counts = {f: by(landmark_keys(ctx, f), "layer", "quantity") for f in (0.5, 0.9, 1.0)}
    for l in range(ctx.adapter.n_layers):
        k = [counts[f][(l, "landmarks")] for f in (0.5, 0.9, 1.0)]
        assert 1 <= k[0] <= k[1] <= k[2] <= n_a
        assert 0.0 < counts[0.9][(l, "a_mass")] <= 1.0 + 1e-6
    assert {r["n_a"] for r in landmark_keys(ctx)} == {n_a}
    with pytest.raises(ValueError, match="fraction"):
        landmark_keys(ctx, 1.5)


def test_landmarks_need_an_a_span(tiny):
    adapter = tiny("tiny_llava")
    ctx = ReuseContext(adapter, [Span("prefix", ("Answer.",)), Span("B", ("the ball is red",)),
                                 Span("query", ("Colour? Answer:",))])
    with pytest.raises(ValueError, match="A span"):
        landmark_keys(ctx)


# ----- Fig. 8 ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi", "tiny_deepseek_vl"])
def test_depth_planes_pool_abs_delta_and_keep_every_cell_unpooled(tiny, name):
    ctx = context(tiny, name)
    n, L = ctx.n_b, ctx.adapter.n_layers
    coarse = depth_planes(ctx, tokens=4, features=8)
    assert len(coarse) == L * len(ctx.adapter.specs) * 4 * 8
    assert {(r["n_token_bins"], r["n_feature_bins"]) for r in coarse} == {(4, 8)}
    big = 10_000  # bins beyond the matrix: one bin per cell, the plane is |Δ| itself
    for basis in ("features", "components"):
        fine = by(depth_planes(ctx, tokens=big, features=big, basis=basis), "layer", "channel", "token_bin",
                  "feature_bin")
        for l in range(L):
            for c, spec in enumerate(ctx.adapter.specs):
                m = ctx.deficit.matrix(l, c) if basis == "features" else ctx.patch.factors[l][c][0].us.float()
                got = torch.tensor([[fine[(l, spec.name, i, j)] for j in range(m.shape[1])] for i in range(n)])
                assert torch.equal(got, m.abs().cpu())
    # pooling to one bin is the mean |Δ|
    one = by(depth_planes(ctx, tokens=1, features=1), "layer", "channel", "token_bin", "feature_bin")
    assert one[(L - 1, ctx.adapter.specs[0].name, 0, 0)] == pytest.approx(
        float(ctx.deficit.matrix(L - 1, 0).abs().mean())
    )


def test_depth_planes_reject_bad_bins_and_basis(tiny):
    ctx = context(tiny, "tiny_llava")
    with pytest.raises(ValueError, match="bins"):
        depth_planes(ctx, tokens=0)
    with pytest.raises(ValueError, match="basis"):
        depth_planes(ctx, basis="pixels")
    with pytest.raises(ValueError, match="non-empty"):
        pooled(torch.zeros(0, 4), 2, 2)
