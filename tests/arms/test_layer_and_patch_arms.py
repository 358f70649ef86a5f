"""shallow_reprefill, cacheblend's check layers, the orbit patch, shadowkv and the matched-byte helper."""

from __future__ import annotations

import math

import pytest
import torch
from arms_support import b_kv, changed_rows, rel_err, shared_ctx
from tinyfamilies import TINY, standard_spans

from kamera.arms import ArmRefusal, make_arm
from kamera.arms.budget import matched_k_rank, matched_tokens, tokens_for
from kamera.arms.orbit import conditioned_in_order
from kamera.core import Patch, deficit, orbit_mean
from kamera.metrics import kl
from kamera.reuse.context import ReuseContext


# ----- shallow re-prefill --------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_shallow_reprefill_endpoints_and_bytes(tiny, name):
    ctx = shared_ctx(tiny, name)
    n_layers = ctx.adapter.n_layers
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    for knobs in ({"reuse_layers": 0}, {"rerun_fraction": 1.0}):
        arm = make_arm("shallow_reprefill", **knobs)
        out = arm.run(ctx)
        assert rel_err(b_kv(ctx, out.out), ctx.conditioned) <= 1e-5
        assert kl(ctx.reprefill_logits, out.out.logits) <= 1e-6 * kl_blind
        assert out.bytes == ctx.page_bytes() and out.params["reused_layers"] == 0
    for knobs in ({"reuse_layers": n_layers}, {"rerun_fraction": 0.0}):
        arm = make_arm("shallow_reprefill", **knobs)
        out = arm.run(ctx)
        assert torch.equal(out.out.logits, ctx.blind.logits) and out.bytes == 0
    out = make_arm("shallow_reprefill", reuse_layers=2).run(ctx)
    assert out.bytes == ctx.page_bytes() * (n_layers - 2) // n_layers
    assert out.params["residual_bytes"] == ctx.n_b * ctx.enc.spans[ctx.b].embeds[0].nbytes
    assert out.params["computed_fraction"] == pytest.approx((n_layers - 1) / n_layers)


def test_shallow_reprefill_refuses_more_layers_than_the_model(tiny):
    ctx = shared_ctx(tiny, "tiny_llava")
    deep = make_arm("shallow_reprefill", reuse_layers=ctx.adapter.n_layers + 1)
    assert "exceeds the model's 4 layers" in deep.refuses(ctx.adapter)  # the runner skips it for this model
    with pytest.raises(ArmRefusal, match="exceeds"):
        deep.run(ctx)
    assert make_arm("shallow_reprefill", reuse_layers=ctx.adapter.n_layers).refuses(ctx.adapter) is None
    assert make_arm("shallow_reprefill", rerun_fraction=0.5).reused(28) == 14


# ----- cacheblend ----------------------------------------------------------------------------------
def test_cacheblend_keeps_the_top_deviation_rows_at_the_check_layer(tiny):
    ctx = shared_ctx(tiny, "tiny_qwen2_5_vl")
    out = make_arm("cacheblend", ratio=0.3).run(ctx)
    k = int(0.3 * ctx.n_b)
    assert out.params["n_recomputed"] == k and out.params["check_layers"] == [1]
    assert len(changed_rows(ctx, b_kv(ctx, out.out))) == k
    n_layers = ctx.adapter.n_layers
    computed = 2 * ctx.n_b + (n_layers - 2) * k  # all rows through the check layer, then the kept ones
    assert out.params["computed_fraction"] == pytest.approx(computed / (ctx.n_b * n_layers))
    key = make_arm("cacheblend", ratio=0.3, deviation="key").run(ctx)
    assert key.params["n_recomputed"] == k


def test_cacheblend_counts_and_their_bad_values(tiny):
    """``count`` says what the ratio counts (B, the prompt without its query, the whole prompt), ``at_least_one``
    LMCache's minimum of one row; a typo is refused when the arm is built."""
    ctx = shared_ctx(tiny, "tiny_qwen2_5_vl")
    n_context, n_prompt = ctx.ranges[ctx.b][1], ctx.ranges[-1][1]
    for count, n in (("b", ctx.n_b), ("context", n_context), ("prompt", n_prompt)):
        assert make_arm("cacheblend", ratio=0.1, count=count).kept(0.1, ctx) == min(int(0.1 * n), ctx.n_b)
    assert make_arm("cacheblend", ratio=0.01, count="b", at_least_one=True).kept(0.01, ctx) == 1
    with pytest.raises(ValueError, match="count must be one of"):
        make_arm("cacheblend", count="all")
    with pytest.raises(ValueError, match="at_least_one must be a bool"):
        make_arm("cacheblend", at_least_one="yes")


def test_cacheblend_gradual_schedule(tiny):
    ctx = shared_ctx(tiny, "tiny_kimi")
    arm = make_arm("cacheblend", ratio=0.15, filtering="gradual", checks=3, step=0.05)
    assert arm.schedule(4) == pytest.approx({1: 0.25, 2: 0.2, 3: 0.15})
    out = arm.run(ctx)
    assert out.params["n_recomputed"] == int(0.15 * ctx.n_b)
    assert out.params["check_layers"] == [1, 2, 3]
    with pytest.raises(ValueError, match="exceed"):
        make_arm("cacheblend", filtering="gradual", checks=4).run(ctx)
    with pytest.raises(ValueError, match="exceed"):
        make_arm("cacheblend", check_layer=4).run(ctx)


# ----- orbit ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_orbit_over_the_single_own_ordering_is_the_exact_patch(tiny, name):
    ctx = shared_ctx(tiny, name)
    for rank in (None, 4):
        orbit = make_arm("orbit", rank=rank, hold_out=False, orderings=[[0, 1]]).run(ctx)
        exact = make_arm("patch", rank=rank).run(ctx)
        torch.testing.assert_close(orbit.out.logits, exact.out.logits, rtol=0, atol=1e-6)
        assert orbit.bytes == exact.bytes and orbit.params["n_orderings"] == 1


@pytest.mark.parametrize("name", TINY)
def test_orbit_holds_out_the_test_ordering(tiny, name):
    adapter = tiny(name)
    ctx = ReuseContext(adapter, standard_spans(adapter))
    _ = ctx.blind
    adapter.forwards.clear()
    out = make_arm("orbit", rank=None).run(ctx)
    # K = 2: the only other ordering is (1, 0); its conditioned forward is the orbit
    assert adapter.forwards["orbit_conditioned"] == 1
    assert out.params["exhaustive"] and out.params["n_orderings"] == 1
    make_arm("orbit", rank=8).run(ctx)  # another rank reuses the forward and the SVD
    assert adapter.forwards["orbit_conditioned"] == 1
    both = make_arm("orbit", rank=None, hold_out=False).run(ctx)
    assert both.params["n_orderings"] == 2 and adapter.forwards["orbit_conditioned"] == 1
    # the held-out ordering's patch closes part of the gap; the two-ordering mean is applied as formed
    assert kl(ctx.reprefill_logits, out.out.logits) < kl(ctx.reprefill_logits, ctx.blind.logits)
    mean = orbit_mean([ctx.deficit, deficit(conditioned_in_order(ctx, (1, 0)), ctx.relocated)])
    formed = Patch.form(mean, dtype=adapter.dtype).apply(ctx.relocated)
    assert torch.equal(ctx.query(formed, tag="test").logits, both.out.logits)


def test_orbit_enumerates_and_samples(tiny):
    adapter = tiny("tiny_deepseek_v2")
    ctx = ReuseContext(adapter, standard_spans(adapter, n_a=3))
    assert len(make_arm("orbit").orbit(3)[0]) == 5
    chosen, exhaustive = make_arm("orbit", exhaustive_up_to=2, samples=3, seed=1).orbit(3)
    assert len(chosen) == 3 and not exhaustive and (0, 1, 2) not in chosen
    assert len(make_arm("orbit", exhaustive_up_to=2, samples=99).orbit(3)[0]) == 5  # capped at the orbit
    adapter.forwards.clear()
    out = make_arm("orbit", rank=16).run(ctx)
    assert out.params["n_a"] == 3 and out.params["n_orderings"] == 5
    assert adapter.forwards["orbit_conditioned"] == 5
    # orderings that do not fit this item are its refusal (recorded, the job goes on), never a traceback
    with pytest.raises(ArmRefusal, match="own ordering"):
        make_arm("orbit", orderings=[[0, 1, 2]]).run(ctx)
    with pytest.raises(ArmRefusal, match="not permutations of this item's K = 3"):
        make_arm("orbit", orderings=[[0, 0, 1]]).run(ctx)
    with pytest.raises(ArmRefusal, match="K = 3"):
        make_arm("orbit", orderings=[[1, 0]]).run(ctx)  # written for K = 2
    with pytest.raises(ValueError, match="distinct"):  # wrong for every item: said when the arm is built
        make_arm("orbit", orderings=[[1, 0], [1, 0]])


def test_orbit_refuses_a_single_a_chunk(tiny):
    adapter = tiny("tiny_llava")
    ctx = ReuseContext(adapter, standard_spans(adapter, n_a=1))
    with pytest.raises(ValueError, match="at least 2 A chunks"):
        make_arm("orbit").run(ctx)


# ----- shadowkv ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_shadowkv_full_rank_rebuilds_the_conditioned_keys(tiny, name):
    ctx = shared_ctx(tiny, name)
    arm = make_arm("shadowkv", rank=10_000)
    reason = arm.refuses(ctx.adapter)
    if ctx.adapter.attention == "MLA":
        assert reason and "latent" in reason
        with pytest.raises(ValueError, match="latent"):
            arm.run(ctx)
        return
    if ctx.adapter.specs[0].per_layer is not None:  # Gemma 3: a RoPE base per layer type, one table cannot un-rope
        assert reason and "different frequencies" in reason
        return
    out = arm.run(ctx)
    kv = b_kv(ctx, out.out)
    k = next(i for i, s in enumerate(ctx.adapter.specs) if s.rotary is not None)
    for l in range(ctx.adapter.n_layers):
        ref = ctx.conditioned.layers[l][k].double()
        assert float((kv.layers[l][k].double() - ref).abs().max() / ref.abs().max()) <= 1e-5
        assert torch.equal(kv.layers[l][1 - k], ctx.relocated.layers[l][1 - k])
    width = ctx.adapter.specs[k].width
    eff = min(ctx.n_b, width)
    assert out.params["effective_rank"] == eff
    assert out.bytes == ctx.adapter.n_layers * eff * (ctx.n_b + width) * kv.layers[0][k].element_size()


def test_shadowkv_matched_rank_fits_the_patch_bytes(tiny):
    ctx = shared_ctx(tiny, "tiny_qwen2_5_vl")
    out = make_arm("shadowkv", match_rank=4).run(ctx)
    patch = ctx.patch.truncate(4).nbytes()
    assert out.bytes <= patch
    assert out.bytes + ctx.adapter.n_layers * (ctx.n_b + 128) * 4 > patch  # one more rank would not fit


# ----- matched bytes -------------------------------------------------------------------------------
def test_matched_tokens_reproduce_table_6():
    """Qwen2.5-VL-7B: K and V of 4 kv-heads × 128, 28 layers; the paper's segment has n_B = 480."""
    assert matched_tokens(16, 480, [512, 512], n_layers=28) == 31
    assert matched_tokens(64, 480, [512, 512], n_layers=28) == 124
    assert matched_tokens(64, 480, [512, 512], patched_layers=14, n_layers=28) == 62  # deep-half patch
    assert matched_k_rank(16, 480, [512, 512], 512) == 32
    assert matched_tokens(10_000, 480, [512, 512], n_layers=28) == 480
    with pytest.raises(ValueError, match="non-negative"):
        matched_tokens(-1, 480, [512])


@pytest.mark.parametrize("name", TINY)
def test_tokens_for_never_exceeds_the_patch_bytes(tiny, name):
    """Matched to the patch arm's own patch (on MLA k_pe at rank ⌈m/4⌉, not m)."""
    ctx = shared_ctx(tiny, name)
    row = ctx.page_bytes() // ctx.n_b
    for m in (1, 4, 16):
        t, patch = tokens_for(ctx, m), make_arm("patch", rank=m).run(ctx).bytes
        assert t * row <= patch and (t == ctx.n_b or (t + 1) * row > patch)
    assert math.isclose(tokens_for(ctx, 0), 0)
