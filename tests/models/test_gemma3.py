"""Gemma 3 text (kamera.models.gemma3): sliding-window layers in the 5 : 1 pattern with global ones, two RoPE bases,
one KV head, QK-norm, ``query_pre_attn_scalar``; no final soft-cap.

The tiny twin (12 layers, window 16, layers 5 and 11 global; B longer than the window) runs in ``make test``; the
shaped 270M / 1B / 4B checkpoints in the full tier (``test_shaped_gemma3_*``).
"""

from __future__ import annotations

import pytest
import torch
from shaped_fixtures import shaped_marks
from sliding_support import (
    B_TEXT,
    alone,
    assert_the_query_reads_only_rows_inside_the_window,
    rel_err,
    sliding_layers_of,
    spans,
)

from kamera.core import relocate, rotate
from kamera.diagnostics.windowed import sliding_layers, windowed_deficit
from kamera.metrics import eta, kl
from kamera.models import load_model, place
from kamera.models.shaped import ensure
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import LayerDriver, recompute, reuse_bottom


def reloc_bound(max_position: int) -> float:
    """Relocation's tolerance: 1e-5 plus the model's own float32 RoPE angle rounding, eps · max |p| (p·θ is formed in
    float32, θ ≤ 1; docs/metrics.md's rotary rounding term)."""
    return 1e-5 + torch.finfo(torch.float32).eps * max_position


@pytest.fixture(scope="module")
def twin(tiny):
    return tiny("tiny_gemma3")


@pytest.fixture(scope="module")
def ctx(twin):
    c = ReuseContext(twin, spans())
    assert c.n_b > twin.window  # B outruns the sliding window
    return c


def test_layout_is_gemma3s(twin):
    """12 layers, 5 : 1 sliding / global, one KV head of 128; the K channel turns sliding layers with the local base
    (10⁴) and global ones with rope_theta (10⁶); the twin's score scale is query_pre_attn_scalar's, not head_dim's."""
    c = twin.text_config
    assert twin.n_layers == 12 and sliding_layers_of(twin) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
    k, v = twin.specs
    assert (k.heads, k.dim, v.heads, v.dim) == (1, 128, 1, 128)
    inv = [float(s.inv_freq[1]) for s in k.per_layer]
    assert inv[0] == pytest.approx(1e4 ** (-2 / 128)) and inv[5] == pytest.approx(1e6 ** (-2 / 128))
    assert c.final_logit_softcapping is None
    assert twin.lm.layers[0].self_attn.scaling == pytest.approx(96**-0.5)
    assert twin.refuses("layers") is None


def test_span_forwards_are_the_models_own(twin, ctx):
    """Span-wise embeds (scaled by √hidden) + explicit positions = the model's own forward from ids."""
    ids = torch.cat([s.input_ids for s in ctx.enc.spans])[None]
    with torch.no_grad():
        ref = twin.model(input_ids=ids).logits[0, -1].float()
    torch.testing.assert_close(ctx.reprefill_logits, ref, rtol=0, atol=1e-5)


def test_relocation_is_prefill_at_the_new_position_per_layer_type(twin, ctx):
    """B alone moved by R(δ) = B alone prefilled at +δ on every layer, sliding layers turned with their base and
    global ones with theirs; a float64-angle rotation agrees; turning a global layer with the local base does not."""
    b = ctx.enc.spans[ctx.b].span
    base = alone(twin, b, 0)
    sliding = sliding_layers_of(twin)
    globals_ = [l for l in range(twin.n_layers) if l not in sliding]
    for delta in (1, 97, 1000):
        moved, target = relocate(base, delta), alone(twin, b, delta)
        bound = reloc_bound(delta + base.n_tokens)
        assert rel_err(moved, target, 0, sliding) <= bound and rel_err(moved, target, 0, globals_) <= bound
        assert all(m[1] is x[1] for m, x in zip(moved.layers, base.layers, strict=True))
    for layer in (0, 5):  # a sliding and a global layer, against the float64 rotation by that layer's own spec
        spec = twin.specs[0].rotary_at(layer)
        keys = base.layers[layer][0].double()
        exact = torch.stack([rotate(rotate(keys[t], -t, spec), 500 + t, spec) for t in range(base.n_tokens)])
        got = relocate(base, 500).layers[layer][0].double()
        assert float((got - exact).norm() / exact.norm()) <= 1e-6
    local = twin.specs[0].rotary_at(0)
    wrong = rotate(base.layers[5][0], 97, local).double()  # layer 5 is global
    target = alone(twin, b, 97).layers[5][0].double()
    assert float((wrong - target).norm() / target.norm()) > 1e-2


def test_full_rank_is_re_prefill_and_rank_zero_is_blind(ctx):
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-5
    full = ctx.patch.apply(ctx.relocated)
    assert all(rel_err(full, ctx.conditioned, c) <= 1e-5 for c in range(2))
    assert eta(kl(ref, ctx.query(full).logits), kl_blind, floor=0.0) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits, ctx.blind.logits)


def test_oracle_equals_blind_at_native_positions(twin, ctx):
    """B ↛ A, each sliding row's window counted over the columns it may attend = B as if A were absent."""
    native = ReuseContext(twin, ctx.enc, canonical_context="native")
    assert native.delta == 0
    assert all(rel_err(native.oracle_b, native.canonical, c) <= 1e-5 for c in range(2))
    torch.testing.assert_close(native.oracle.hidden, native.blind.hidden, rtol=1e-4, atol=1e-4)


def test_the_query_reads_only_bs_rows_inside_a_sliding_layers_window(twin, ctx):
    """At a sliding layer, B's rows window − 1 or more slots behind the query are not read by it (corrupting them
    leaves the logits bit-identical); rows inside the window, and every row at a global layer, are."""
    assert_the_query_reads_only_rows_inside_the_window(twin, ctx, read=1e-4)


def test_the_layer_driver_masks_sliding_layers_to_their_window(twin, ctx):
    """The partial-forward engine (token / layer recompute arms) re-prefills B in context exactly: every row at every
    layer recomputed = the full prefill's KV(B|A); the same driver without the window in its sliding layers' mask
    does not (it lets B's rows attend the whole prefix · A)."""
    full = reuse_bottom(ctx, 0)
    assert all(rel_err(full.kv, ctx.conditioned, c) <= 1e-5 for c in range(2))
    some = recompute(ctx, range(0, ctx.n_b, 3))  # a CacheBlend-like subset: runs, and moves B toward KV(B|A)
    assert rel_err(some.kv, ctx.conditioned, 1) < rel_err(ctx.relocated, ctx.conditioned, 1)
    original = LayerDriver.mask
    try:
        LayerDriver.mask = lambda self, rows, layer=None: original(self, rows, None)
        windowless = reuse_bottom(ctx, 0)
    finally:
        LayerDriver.mask = original
    assert rel_err(windowless.kv, ctx.conditioned, 1) > 1e-3


def test_windowed_deficit_splits_delta_by_layer_type(ctx):
    """Energy shares lie in [0, 1]; the full-rank patch on both types is re-prefill; either type alone is between."""
    rec = windowed_deficit(ctx)
    assert rec["layers_sliding"] == pytest.approx(10 / 12)
    assert 0.0 < rec["energy_share_sliding"] < 1.0 and 0.0 < rec["in_window_share"] < 1.0
    assert rec["kl_patch"] < 1e-6 * rec["kl_blind"] + 1e-12
    assert rec["kl_sliding_only"] > rec["kl_patch"] and rec["kl_global_only"] > rec["kl_patch"]
    assert set(sliding_layers(ctx)) == set(sliding_layers_of(ctx.adapter))


def test_greedy_decode_is_transformers_generate(twin, ctx):
    ids = torch.cat([s.input_ids for s in ctx.enc.spans])[None]
    tokens = twin.greedy(ctx.query(ctx.conditioned), max_new_tokens=4)
    assert tokens == twin.greedy(ctx.full, max_new_tokens=4)
    with torch.no_grad():
        own = twin.model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None)[0, ids.shape[1] :]
    assert tokens == own.tolist()


def test_a_4d_mask_past_a_sliding_window_is_refused(twin, ctx):
    q = ctx.enc.spans[ctx.q]
    total = ctx.ranges[ctx.q][1]
    early = torch.full((1, 1, q.n_tokens, total), torch.finfo(torch.float32).min)
    early[..., :10] = 0.0
    with pytest.raises(ValueError, match="sliding layer"):
        twin.forward([(q, ctx.start(ctx.q))], cache=ctx.splice(ctx.conditioned), mask=early)
    assert place(ctx.enc.spans)[ctx.b][1] == ctx.start(ctx.b)


# ----- shaped checkpoints: Gemma 3 270M, 1B and 4B (text), B longer than the real window ---------------------------
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=shaped_marks(n)) for n in ("gemma3_270m", "gemma3_1b", "gemma3_4b")]
)
def test_shaped_gemma3_identities(name, shaped_cache):
    """6 layers (5 sliding, 1 global) of the published widths, vocabulary and RoPE (4B: linear ×8 on global layers):
    relocation per layer type, full rank = re-prefill, rank 0 = blind, with a B past the 512 / 1024-slot window."""
    adapter = load_model(name, models_root=ensure(name, shaped_cache, layers=6), dtype="float32")
    assert [adapter.layer_window(l) is None for l in range(6)] == [False] * 5 + [True]
    c = ReuseContext(adapter, spans(" ".join([B_TEXT] * (14 if name == "gemma3_4b" else 7))))
    assert c.n_b > adapter.window
    b = c.enc.spans[c.b].span
    base = alone(adapter, b, 0)
    assert rel_err(relocate(base, 97), alone(adapter, b, 97), 0) <= reloc_bound(97 + base.n_tokens)
    ref, kl_blind = c.reprefill_logits, kl(c.reprefill_logits, c.blind.logits)
    full = c.patch.apply(c.relocated)
    assert kl(ref, c.query(full).logits) <= 1e-6 * kl_blind + 1e-9
    assert torch.equal(c.query(c.patch.truncate(0).apply(c.relocated)).logits, c.blind.logits)
