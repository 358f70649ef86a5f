"""The Gated DeltaNet hybrid (``tiny_gdn_hybrid``; the shaped ``gdn_hybrid``): its identities.

- the recurrence the adapter composes with is the model's own state (after any run of spans);
- composition is exact at the first layer (B's inputs there are its embeddings) and behind an unchanged context
  (B's canonical page composed behind the prefix is B's canonical state: the "A empty" case);
- full rank = re-prefill (η ≥ 0.999, fp32), rank 0 = blind; attention layers' relocation is exact;
- the 4D-mask oracle is refused; decoding works from a copy of the cache.
"""

from __future__ import annotations

import gc

import pytest
import torch
from tinyfamilies import standard_spans

from kamera.core import relocate
from kamera.core.state import fold
from kamera.metrics import eta, kl
from kamera.models import load_model
from kamera.models.base import place
from kamera.reuse.context import ReuseContext


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def model_states(adapter, cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The model's own (recurrent state [H, d_k, d_v], last K − 1 conv inputs [K − 1, conv_dim]) per GDN layer."""
    out = []
    for s in adapter.state_specs:
        layer = cache.layers[s.layer]
        out.append((layer.recurrent_states[0][0], layer.conv_states[0][0, :, -(s.kernel - 1):].T))
    return out


def check_identities(ctx: ReuseContext) -> None:
    """Composition = the model's state; exact at the first layer; full rank = re-prefill; rank 0 = blind."""
    a = ctx.adapter
    # the state after [prefix · A · B] as the model computes it = the carries the adapter composes
    out = a.forward(place(ctx.enc.spans[: ctx.b + 1], ctx.offset))
    mine = a.carry_at(out.cache, ctx.ranges[ctx.b][1])
    for (state, conv), carry in zip(model_states(a, out.cache), mine, strict=True):
        assert rel(carry.state, state) <= 1e-4
        torch.testing.assert_close(carry.history, conv, rtol=0, atol=0)
    # blind composition: exact at the first layer, not deeper (the deficit B's inputs carry)
    delta = ctx.deficit.state
    cond = ctx.conditioned.state.after()
    assert float(delta.deltas[0].norm()) <= 1e-5 * float(cond[0].state.norm())
    deeper = [rel(d, c.state) for d, c in zip(delta.deltas[1:], cond[1:], strict=True)]  # later GDN layers
    deeper += [rel(d[1], c[1]) for d, c in zip(ctx.deficit.layers, ctx.conditioned.layers, strict=True)]  # V
    assert max(deeper) > 1e-4
    # "A empty": B's canonical page composed behind the prefix is B's canonical state
    prefix = a.cache([ctx.context_kv[0]])
    solo = a.forward([(ctx.enc.spans[ctx.b], ctx.canonical_start)], cache=prefix)
    behind_prefix = fold([ctx.context_kv[0].state, ctx.canonical.state], a.dtype, a.device)
    for (state, _), carry in zip(model_states(a, solo.cache), behind_prefix, strict=True):
        assert rel(carry.state, state) <= 1e-4
    # full rank = re-prefill, rank 0 = blind
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-9  # far above float32 rounding (the random tiny twin's deficit is below eta's default floor)
    full = ctx.patch.truncate(None).apply(ctx.relocated)
    assert eta(kl(ref, ctx.query(full).logits), kl_blind, floor=1e-9) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).hidden, ctx.blind.hidden)


def check_relocation(adapter, ctx: ReuseContext) -> None:
    """B prefilled alone and moved by R(δ) = B prefilled alone at +δ: keys to 1e-5, values and state pages equal."""
    b = ctx.enc.spans[ctx.b]

    def alone(start: int):
        out = adapter.forward([(b, start)])
        return adapter.read(out.cache, 0, b.n_tokens, b.local_pos + start)

    base, there = alone(0), alone(97)
    moved = relocate(base, 97)
    assert moved.state is base.state
    for (k, v), (k2, v2) in zip(moved.layers, there.layers, strict=True):
        assert rel(k, k2) <= 1e-5 and rel(v, v2) <= 1e-5
    for p, q in zip(moved.state.pages, there.state.pages, strict=True):
        assert rel(p.state, q.state) <= 1e-5 and rel(p.transition, q.transition) <= 1e-5


# ----- the tiny twin ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_gdn():
    return load_model("tiny_gdn_hybrid")


@pytest.fixture(scope="module")
def ctx(tiny_gdn):
    return ReuseContext(tiny_gdn, standard_spans(tiny_gdn, n_a=1))


def test_tiny_layers_and_channels(tiny_gdn):
    assert tiny_gdn.gdn_layers == [0, 1, 2] and tiny_gdn.attn_layers == [3]
    assert [s.name for s in tiny_gdn.specs] == ["k", "v"] and tiny_gdn.specs[0].rotary.rotary_dim == 16


def test_tiny_identities(ctx):
    check_identities(ctx)


def test_tiny_relocation(tiny_gdn, ctx):
    check_relocation(tiny_gdn, ctx)


def test_patch_bytes_count_the_state_patch(tiny_gdn, ctx):
    """A rank-m state patch stores m·(d_k + d_v) per value head and GDN layer; the KV patch its own."""
    s = tiny_gdn.state_specs[0]
    cols = ctx.patch.truncate(4).nbytes_by_channel()
    assert cols["state"] == 4 * s.value_heads * (s.key_dim + s.value_dim) * 4 * len(tiny_gdn.state_specs)
    assert cols["k"] > 0 and cols["v"] > 0
    assert ctx.page_bytes() == ctx.conditioned.nbytes() > sum(t.numel() * 4 for c in ctx.conditioned.layers for t in c)


def test_oracle_is_refused_and_decoding_copies_the_cache(tiny_gdn, ctx):
    with pytest.raises(ValueError, match="4D mask cannot keep A out"):
        ctx.oracle  # noqa: B018
    out = ctx.blind
    before = [x.clone() for x, _ in model_states(tiny_gdn, out.cache)]
    assert tiny_gdn.greedy(out, 3) == tiny_gdn.greedy(out, 3)
    assert all(torch.equal(b, x) for b, (x, _) in zip(before, model_states(tiny_gdn, out.cache), strict=True))


def test_a_chunk_without_state_pages_is_an_error(tiny_gdn, ctx):
    bare = ctx.relocated.with_layers(ctx.relocated.layers)
    bare.state = None
    with pytest.raises(ValueError, match="GDN state pages"):
        tiny_gdn.cache([bare])


# ----- the shaped checkpoint (Qwen3.5-27B's dimensions, 2 layers: one GDN, one full attention) --------------
@pytest.fixture(scope="module")
def shaped_gdn(shaped_root):
    adapter = load_model("gdn_hybrid", models_root=shaped_root("gdn_hybrid"), dtype="float32")
    yield adapter
    del adapter
    gc.collect()


@pytest.mark.shaped
def test_shaped_identities(shaped_gdn):
    a = shaped_gdn
    assert a.gdn_layers == [0] and a.attn_layers == [1]
    s = a.state_specs[0]
    assert (s.key_heads, s.value_heads, s.key_dim, s.value_dim, s.kernel) == (16, 48, 128, 128, 4)
    assert a.specs[0].width == 4 * 256 and a.specs[0].rotary.rotary_dim == 64
    ctx = ReuseContext(a, standard_spans(a, n_a=1))
    check_identities(ctx)
    check_relocation(a, ctx)


def test_state_specs_follow_a_float32_upcast_after_loading():
    """A bf16 checkpoint run in float32 is upcast after the adapter is built: the GDN layers' parameters the
    composition reads are the upcast ones (else its conv would run in bf16, 1e-3 off the model's state)."""
    from kamera.models.loading import upcast_except_vocab

    adapter = load_model("tiny_gdn_hybrid", dtype="bfloat16")
    upcast_except_vocab(adapter, torch.float32)
    assert all(s.conv_weight.dtype == torch.float32 and s.a_log.dtype == torch.float32 for s in adapter.state_specs)
