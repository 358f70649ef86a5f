"""The operator's exact identities on every tiny family, through the real transformers forwards."""

from __future__ import annotations

import math

import pytest
import torch
from tinyfamilies import TINY, standard_spans

from kamera.core import ChunkKV, Patch, relocate, rotate
from kamera.items.spans import Span
from kamera.metrics import eta, kl
from kamera.reuse.context import ReuseContext


def rel_err(a: ChunkKV, b: ChunkKV, channel: int) -> float:
    """Worst layer of ‖a − b‖_F / ‖b‖_F on one channel."""
    return max(
        float((la[channel].double() - lb[channel].double()).norm() / lb[channel].double().norm())
        for la, lb in zip(a.layers, b.layers, strict=True)
    )


def rotary_channel(adapter) -> int:
    return next(i for i, s in enumerate(adapter.specs) if s.rotary is not None)


def content_channel(adapter) -> int:
    return next(i for i, s in enumerate(adapter.specs) if s.rotary is None)


def chunk_at(adapter, span, start: int) -> ChunkKV:
    """The span prefilled alone at ``start``."""
    enc = adapter.encode_span(span)
    out = adapter.forward([(enc, start)])
    return adapter.read(out.cache, 0, enc.n_tokens, enc.local_pos + start)


# ----- relocation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_relocation_matches_prefill_at_the_new_position_fp32(tiny, name):
    adapter = tiny(name)
    b = standard_spans(adapter)[-2]
    base = chunk_at(adapter, b, 0)
    k, v = rotary_channel(adapter), content_channel(adapter)
    for delta in (1, 100, 1000, 3000):
        moved = relocate(base, delta)
        err = rel_err(moved, chunk_at(adapter, b, delta), k)
        # the model forms p·θ in float32, so its own prefill at p ≈ 3000 carries ~1e-5 of angle rounding (at most
        # eps · max |p|, docs/metrics.md: Gemma 3's 128-wide head at its local base reaches 1.06e-5 by p ≈ 1090)
        bound = max(1e-5 if delta <= 1000 else 3e-5, torch.finfo(torch.float32).eps * (delta + base.n_tokens))
        assert err <= bound, (delta, err)
        assert all(lm[v] is lb[v] for lm, lb in zip(moved.layers, base.layers, strict=True))


@pytest.mark.parametrize("name", TINY)
def test_relocation_is_exact_against_float64_angles(tiny, name):
    """Layer-0 keys depend on position only through RoPE: R(δ) matches a float64-angle rotation to 1e-6,
    so the residual in the test above is the model's own float32 angle rounding, not relocation."""
    adapter = tiny(name)
    text_b = Span("B", ("the ball waits by the red door",))  # text: t = h = w, every pair turns by p·θ_i
    base = chunk_at(adapter, text_b, 0)
    k = rotary_channel(adapter)
    spec = adapter.specs[k].rotary
    keys0 = base.layers[0][k].double()
    unroped = torch.stack([rotate(keys0[t], -t, spec) for t in range(base.n_tokens)])
    for delta in (1000, 3000):
        exact = torch.stack([rotate(unroped[t], delta + t, spec) for t in range(base.n_tokens)])
        moved = relocate(base, delta).layers[0][k].double()
        assert float((moved - exact).norm() / exact.norm()) <= 1e-6


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(1e-30))) - 7)


@pytest.mark.parametrize("name", TINY)
def test_relocation_within_two_bf16_ulps(tiny, name):
    """In bf16, layer-0 relocated keys sit within 2 ulps (at each token-head's scale) of the prefill.

    Deeper layers also differ by bf16 attention noise at other absolute positions (tens of ulps),
    which no relocation can remove; layer 0 isolates what relocation itself adds."""
    adapter = tiny(name, "bfloat16")
    b = standard_spans(adapter)[-2]
    base = chunk_at(adapter, b, 0)
    k = rotary_channel(adapter)
    for delta in (1, 100, 3000):
        target = chunk_at(adapter, b, delta).layers[0][k].float()
        err = (relocate(base, delta).layers[0][k].float() - target).abs()
        scale = bf16_ulp(target.abs().amax(-1, keepdim=True))
        assert float((err / scale).max()) <= 2.0, delta


# ----- the patch -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def contexts(tiny):
    return {name: ReuseContext(tiny(name), standard_spans(tiny(name))) for name in TINY}


@pytest.mark.parametrize("name", TINY)
def test_full_rank_patch_is_re_prefill_and_rank_zero_is_blind(contexts, name):
    ctx = contexts[name]
    ref = ctx.reprefill_logits
    kl_blind = kl(ref, ctx.blind.logits)
    assert kl_blind > 1e-4  # a measurable deficit on every family
    full = ctx.patch.apply(ctx.relocated)
    for c in range(2):
        assert rel_err(full, ctx.conditioned, c) <= 1e-5
    kl_full = kl(ref, ctx.query(full).logits)
    assert kl_full <= 1e-6 * kl_blind
    assert eta(kl_full, kl_blind) >= 0.999
    zero = ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits
    assert torch.equal(zero, ctx.blind.logits)


@pytest.mark.parametrize("name", TINY)
def test_kl_falls_from_rank_zero_to_full_rank(contexts, name):
    """Endpoints exactly (above); the sweep loosely: never worse than blind, and shrinking overall."""
    ctx = contexts[name]
    ref = ctx.reprefill_logits
    kl_blind = kl(ref, ctx.blind.logits)
    ranks = [1, 2, 4, 8, 16, ctx.patch.full_rank]
    kls = [kl(ref, ctx.query(ctx.patch.truncate(m).apply(ctx.relocated)).logits) for m in ranks]
    assert all(x <= 1.05 * kl_blind for x in kls)
    assert kls[-1] <= min(kls) + 1e-12
    assert kls[3] <= 0.5 * kl_blind and kls[4] <= kls[0]


@pytest.mark.parametrize("name", TINY)
def test_relocating_a_patch_with_b_and_a_equals_forming_it_there(tiny, name):
    adapter = tiny(name)
    spans = standard_spans(adapter)
    d = 257
    here, there = ReuseContext(adapter, spans), ReuseContext(adapter, spans, offset=d)
    assert there.delta == here.delta
    for m in (None, 4):
        moved = here.patch.truncate(m).relocate(d).apply(there.relocated)
        formed = there.patch.truncate(m).apply(there.relocated)
        for c in range(2):
            assert rel_err(moved, formed, c) <= 1e-4
    moved = here.patch.relocate(d).apply(there.relocated)
    assert rel_err(moved, there.conditioned, rotary_channel(adapter)) <= 1e-4


# ----- the 4D-mask oracle --------------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_oracle_b_equals_b_behind_the_prefix_at_native_positions(tiny, name):
    adapter = tiny(name)
    native = ReuseContext(adapter, standard_spans(adapter), canonical_context="native")
    assert native.delta == 0
    for c in range(2):
        assert rel_err(native.oracle_b, native.canonical, c) <= 1e-5
    # blind reuse at native positions (canonical formed there) and the oracle agree at the query too
    torch.testing.assert_close(native.blind.logits, native.oracle.logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi"])
def test_oracle_isolates_conditioning_and_relocation_adds_little(contexts, name):
    ctx = contexts[name]
    loss_kl, ctrl_kl = ctx.loss_kl(), ctx.ctrl_kl()
    assert loss_kl == kl(ctx.reprefill_logits, ctx.oracle.logits) and ctrl_kl == kl(ctx.oracle.logits, ctx.blind.logits)
    assert loss_kl > 1e-4 and ctrl_kl < loss_kl
    ctx_alone = ReuseContext(ctx.adapter, ctx.enc, canonical_context="none")
    assert ctx_alone.canonical_start == 0 and ctx_alone.delta == ctx.b_start


# ----- bytes and bookkeeping -----------------------------------------------------------------------
@pytest.mark.parametrize("name", TINY)
def test_patch_bytes_in_the_models_own_layout(contexts, name):
    ctx = contexts[name]
    n, specs, layers = ctx.n_b, ctx.adapter.specs, ctx.adapter.n_layers
    item = torch.empty((), dtype=ctx.adapter.dtype).element_size()
    page = layers * n * sum(s.width for s in specs) * item
    assert ctx.page_bytes() == page
    for m in (1, 8, 16):
        expect = layers * sum(min(m, n, s.width) * (n + s.width) for s in specs) * item
        patch = ctx.patch.truncate(m)
        assert patch.nbytes() == expect
        assert patch.bytes_fraction(ctx.conditioned) == pytest.approx(expect / page)


def test_rank_above_n_b_is_clamped_and_reported(contexts):
    ctx = contexts["tiny_llava"]
    p = ctx.patch.truncate(128)
    assert p.effective_rank == min(ctx.n_b, 256) == ctx.patch.full_rank
    assert p.nbytes() == ctx.patch.nbytes()


def test_bf16_patch_factors_are_stored_in_bf16(tiny):
    adapter = tiny("tiny_qwen2_5_vl", "bfloat16")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    patch: Patch = ctx.patch.truncate(16)
    assert patch.factors[0][0][0].us.dtype == torch.bfloat16
    assert patch.nbytes() == adapter.n_layers * 2 * 16 * (ctx.n_b + 128) * 2
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    kl_full = kl(ctx.reprefill_logits, ctx.query(ctx.patch.apply(ctx.relocated)).logits)
    assert kl_full < 0.05 * kl_blind  # bf16 floor, far below blind


def test_shared_forwards_run_once(tiny):
    adapter = tiny("tiny_qwen3_vl")
    adapter.forwards.clear()
    ctx = ReuseContext(adapter, standard_spans(adapter))
    for m in (1, 4, 16, None):
        ctx.query(ctx.patch.truncate(m).apply(ctx.relocated))
    _ = ctx.blind, ctx.blind, ctx.deficit, ctx.canonical
    assert adapter.forwards == {"full": 1, "solo": 1, "query": 4, "blind": 1}
    _ = ctx.oracle_b, ctx.oracle
    assert adapter.forwards["oracle"] == 1


def test_eta_floor_and_nan():
    assert math.isnan(eta(0.0, 5e-5))
    assert eta(0.25, 1.0) == pytest.approx(0.75)


# ----- the position control on a prefix-less benchmark --------------------------------------------
@pytest.fixture(scope="module")
def prefixless_items(tmp_path_factory):
    """MM-NIAH (no benchmark prefix) and MuSiQue without its instruction prefix: items that start with A."""
    from kamera.data import load_items, make_fixture

    root = tmp_path_factory.mktemp("data")
    make_fixture("mm_niah", root, n=2, seed=0)
    make_fixture("musique", root, n=2, seed=0)
    images = load_items("mm_niah", root=root / "MM-NIAH", subset="retrieval-image", n_items=1, seed=0)[0].spans()
    text = load_items("musique", root=root / "MuSiQue", n_items=1, seed=0)[0].spans(with_prefix=False)
    assert images[0].role == "A" and text[0].role == "A"
    return {"images": images, "text": text}


@pytest.mark.parametrize("name", TINY)
def test_position_control_can_fail_on_a_prefix_less_item(tiny, prefixless_items, name):
    """Tiny models frame every item as a chat template would, so a benchmark without a prefix still puts
    B behind a header: the canonical sits behind it, relocation changes the header ↔ B distance, and
    ctrl-KL measures what that adds (above rounding) while staying below the conditioning loss. Without
    the framing, canonical = B alone = the oracle's B and ctrl-KL is 0 by construction (checked too)."""
    adapter = tiny(name)
    spans = prefixless_items["images" if adapter.reads_images else "text"]
    ctx = ReuseContext(adapter, spans)
    assert ctx.has_prefix and ctx.enc.spans[0].span.name == "chat"
    ctrl, loss = ctx.ctrl_kl(), ctx.loss_kl()
    assert 1e-9 < ctrl < loss, (ctrl, loss)
    alone = ReuseContext(adapter, spans, canonical_context="none")
    assert alone.canonical_start == 0 and alone.delta == alone.b_start
    chat, adapter.chat = adapter.chat, None
    try:
        bare = ReuseContext(adapter, spans)
        assert not bare.has_prefix and bare.ctrl_kl() < 1e-12
    finally:
        adapter.chat = chat


# ----- fractional positions: Qwen-Omni's video time ----------------------------------------------------
def test_same_positions_accepts_float32_rounding_only():
    from kamera.core import same_positions

    p = torch.tensor([[41.0, 45.333332], [41.0, 42.0], [42.0, 41.0]])
    assert same_positions(p, p + torch.tensor([[0.0, 4e-6], [0.0, 0.0], [0.0, 0.0]]))  # one float32 ulp at 45
    assert not same_positions(p, p + torch.tensor([[0.0, 1e-3], [0.0, 0.0], [0.0, 0.0]]))
    assert not same_positions(p, p[:, :1]) and not same_positions(torch.arange(4), torch.arange(4) + 1)


def test_an_omni_video_chunk_with_fractional_time_positions_keeps_the_identities(tiny, tmp_path):
    """Video-MME clips at 1/3-second steps give Qwen-Omni fractional temporal positions (seconds × 13), so B's
    positions in context and relocated from the canonical differ in the last float32 bit: Δ still forms, the
    full-rank patch is re-prefill and rank 0 is blind."""
    from kamera.data import load_items, make_fixture

    make_fixture("videomme", tmp_path, n=2, seed=0)
    spans = load_items("videomme", root=tmp_path / "Video-MME", n_items=1, seed=0)[0].spans()
    ctx = ReuseContext(tiny("tiny_qwen3_omni"), spans)
    positions = ctx.conditioned.positions
    assert not torch.equal(positions, positions.round())  # the case: fractional time positions
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl(ref, ctx.query(ctx.patch.apply(ctx.relocated)).logits) <= 1e-6 * kl_blind
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits, ctx.blind.logits)
