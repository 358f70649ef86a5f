"""The partial-forward engine's identities on every tiny family (kamera/reuse/recompute.py)."""

from __future__ import annotations

import pytest
import torch
from arms_support import changed_rows, rel_err, shared_ctx
from tinyfamilies import TINY, standard_spans

from kamera.metrics import kl
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import recompute, recompute_schedule, reuse_bottom, solo_pass


@pytest.mark.parametrize("name", TINY)
def test_all_rows_at_all_layers_is_reprefill(tiny, name):
    ctx = shared_ctx(tiny, name)
    rec = recompute(ctx, range(ctx.n_b))
    assert rel_err(rec.kv, ctx.conditioned) <= 1e-5
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-4
    assert kl(ctx.reprefill_logits, ctx.query(rec.kv, tag="test").logits) <= 1e-6 * kl_blind
    assert rec.n_written_cells == rec.cells == ctx.n_b * ctx.adapter.n_layers
    if name.startswith("tiny_qwen3_vl"):  # the deepstack path is exercised: B's visual rows carry features
        assert ctx.enc.spans[ctx.b].deepstack is not None and bool(ctx.enc.spans[ctx.b].visual.any())


@pytest.mark.parametrize("name", TINY)
def test_no_rows_is_blind_bit_for_bit(tiny, name):
    ctx = shared_ctx(tiny, name)
    rec = recompute(ctx, [])
    assert rec.cells == 0 and changed_rows(ctx, rec.kv) == []
    assert torch.equal(ctx.query(rec.kv, tag="test").logits, ctx.blind.logits)


@pytest.mark.parametrize("name", TINY)
def test_leading_rows_recomputed_equal_the_full_prefill(tiny, name):
    """B's first j rows see only context and each other: recomputed together they are exactly re-prefill;
    every other row keeps blind reuse's KV bit for bit."""
    ctx = shared_ctx(tiny, name)
    j = ctx.n_b // 3
    rec = recompute(ctx, range(j))
    assert rel_err(rec.kv.slice(0, j), ctx.conditioned.slice(0, j)) <= 1e-5
    assert changed_rows(ctx, rec.kv) == list(range(j))
    assert all(torch.equal(w, torch.arange(j)) for w in rec.written)


@pytest.mark.parametrize("name", TINY)
def test_reuse_bottom_endpoints(tiny, name):
    ctx = shared_ctx(tiny, name)
    n_layers = ctx.adapter.n_layers
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    for ell in (0, 1):  # layer-0 K/V never see the context: keeping them changes nothing but rounding
        rec = reuse_bottom(ctx, ell)
        assert rel_err(rec.kv, ctx.conditioned) <= 1e-5
        assert kl(ctx.reprefill_logits, ctx.query(rec.kv, tag="test").logits) <= 1e-6 * kl_blind
    top = reuse_bottom(ctx, n_layers)
    assert changed_rows(ctx, top.kv) == [] and top.cells == 0
    assert torch.equal(ctx.query(top.kv, tag="test").logits, ctx.blind.logits)


@pytest.mark.parametrize("name", TINY)
def test_reuse_bottom_keeps_the_bottom_layers_and_conditions_the_rest(tiny, name):
    ctx = shared_ctx(tiny, name)
    n_layers = ctx.adapter.n_layers
    rec = reuse_bottom(ctx, 2)
    for l in range(n_layers):
        same = all(torch.equal(x, y) for x, y in zip(rec.kv.layers[l], ctx.relocated.layers[l], strict=True))
        assert same == (l < 2), l
    assert [w.numel() for w in rec.written] == [0, 0] + [ctx.n_b] * (n_layers - 2)
    assert rec.cells == ctx.n_b * (n_layers - 1)  # the lead-in layer 1 runs, its K/V are kept as reused


@pytest.mark.parametrize("name", TINY)
def test_solo_pass_reproduces_the_canonical(tiny, name):
    ctx = shared_ctx(tiny, name)
    solo = solo_pass(ctx)
    assert rel_err(solo.kv, ctx.canonical) <= 1e-5
    assert len(solo.hidden) == ctx.adapter.n_layers + 1
    assert torch.equal(solo.hidden[0], ctx.enc.spans[ctx.b].embeds)


def test_canonical_alone_and_native_contexts(tiny):
    adapter = tiny("tiny_qwen2_5_vl")
    for where in ("none", "native"):
        ctx = ReuseContext(adapter, standard_spans(adapter), canonical_context=where)
        assert rel_err(solo_pass(ctx).kv, ctx.canonical) <= 1e-5
        assert rel_err(reuse_bottom(ctx, 0).kv, ctx.conditioned) <= 1e-5


def test_engine_rejects_bad_input(tiny):
    ctx = shared_ctx(tiny, "tiny_llava")
    n_layers = ctx.adapter.n_layers
    with pytest.raises(ValueError, match="rows must lie"):
        recompute(ctx, [ctx.n_b])
    with pytest.raises(ValueError, match="out of range"):
        recompute(ctx, [0], layers=[n_layers])
    with pytest.raises(ValueError, match="schedule names"):
        recompute_schedule(ctx, [[0]])
    with pytest.raises(ValueError, match="reused layers"):
        reuse_bottom(ctx, n_layers + 1)


def test_engine_forward_tags(tiny):
    adapter = tiny("tiny_kimi")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    _ = ctx.blind
    adapter.forwards.clear()
    recompute(ctx, range(4))
    reuse_bottom(ctx, 2)
    reuse_bottom(ctx, 3)
    assert adapter.forwards == {"recompute": 3, "solo_hidden": 1}


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_deepseek_v2"])
def test_all_rows_in_bf16_sit_at_the_rounding_floor(tiny, name):
    """bf16: recomputing all of B lands within bf16 rounding of re-prefill, as the full-rank patch does."""
    adapter = tiny(name, "bfloat16")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    rec = recompute(ctx, range(ctx.n_b))
    assert rel_err(rec.kv, ctx.conditioned) <= 2e-2
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl(ctx.reprefill_logits, ctx.query(rec.kv, tag="test").logits) <= 1e-2 * kl_blind
