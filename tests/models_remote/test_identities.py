"""The operator's identities on shaped Kimi-VL-A3B and Phi-3.5-V checkpoints (real dims, random weights).

Each model's tests run together (module-scoped parameter), float32 first, then bfloat16, so one model
is loaded at a time. Items are small (a few dozen tokens for Kimi-VL; Phi-3.5-V's smallest HD image is
313 tokens), the MLA byte test uses a 576-token B as the paper does.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch
from shaped_fixtures import shaped_marks
from test_operator import bf16_ulp, rel_err
from tinyfamilies import noise_image

from kamera.core import ChunkKV, relocate, rotate
from kamera.items.spans import Span
from kamera.metrics import eta, kl
from kamera.models import place
from kamera.reuse.context import ReuseContext

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import remote_reference

pytestmark = pytest.mark.shaped  # Kimi-VL (the MLA canary) in CI, its mapping against the public reference included;
# Phi-3.5-V and the bf16 checks in make test-full


@pytest.fixture(
    scope="module", params=[pytest.param(n, marks=shaped_marks(n)) for n in ("kimi_vl_a3b", "phi3_5_vision")]
)
def name(request) -> str:
    return request.param


def prepare(adapter):
    """Phi-3.5-V with one HD crop per image (313 tokens, the smallest HD layout) to keep CPU forwards short."""
    if adapter.family == "phi3_v" and adapter.image_processor.num_crops != 1:
        adapter.image_processor = dataclasses.replace(adapter.image_processor, num_crops=1)
    return adapter


@pytest.fixture
def fp32(remote, name):
    return prepare(remote(name, "float32"))


@pytest.fixture
def bf16(remote, name):
    return prepare(remote(name, "bfloat16"))


def spans(adapter) -> list[Span]:
    """[prefix, A, B, query]; images in A and B for Kimi-VL, A as text for Phi-3.5-V (313-token images)."""
    a = (noise_image(1, 56), "key 1") if adapter.family == "kimi_vl" else ("the key is number 1 and it is red.",)
    return [
        Span("prefix", ("Answer with a letter.",)),
        Span("A", a),
        Span("B", (noise_image(2, 84).crop((0, 0, 84, 56)), "the ball is by the door")),
        Span("query", ("Which colour is at the door? A, B, C or D. Answer:",)),
    ]


def rotary(adapter) -> int:
    return next(i for i, s in enumerate(adapter.specs) if s.rotary is not None)


def prefills_of_b(adapter, deltas: tuple[int, ...]) -> dict[int, ChunkKV]:
    """B prefilled alone at each start in ``deltas`` (B encoded once: the vision tower runs once)."""
    b = adapter.encode_span(spans(adapter)[2])
    out = {}
    for d in deltas:
        cache = adapter.forward([(b, d)]).cache
        out[d] = adapter.read(cache, 0, b.n_tokens, b.local_pos + d)
    return out


# ----- float32 ---------------------------------------------------------------------------------------------
def test_cache_holds_what_the_paper_patches(fp32):
    b = fp32.encode_span(spans(fp32)[2])
    cache = fp32.forward([(b, 0)]).cache
    n = b.n_tokens
    layout = [(s.name, s.heads, s.dim, s.rotary is not None) for s in fp32.specs]
    if fp32.family == "kimi_vl":
        assert layout == [("c_kv", 1, 512, False), ("k_pe", 1, 64, True)]
        assert fp32.specs[1].rotary.layout == "half" and fp32.specs[1].rotary.rotary_dim == 64
        shapes = [(1, 1, n, 512), (1, 1, n, 64)]
    else:
        assert layout == [("k", 32, 96, True), ("v", 32, 96, False)]
        shapes = [(1, 32, n, 96), (1, 32, n, 96)]
    for layer in cache.layers:
        assert [tuple(layer.keys.shape), tuple(layer.values.shape)] == shapes


def test_native_forward_matches_the_public_reference(fp32, shaped, name):
    """The native mapping vs an independent forward over the checkpoint's own tensors (remote semantics).
    Phi-3.5-V's runs through ``scripts/gpu_check.py`` in test_gpu_check.py (same comparison, not repeated)."""
    if name != "kimi_vl_a3b":
        pytest.skip("covered by test_gpu_check.py::test_remote_equivalence_on_the_shaped_phi_checkpoint")
    item = spans(fp32)[1:]
    enc = fp32.encode(item)
    ids = torch.cat([s.input_ids for s in enc.spans]).tolist()
    images = []
    for part in (p for s in item for p in s.parts if not isinstance(p, str)):
        px = fp32._pixels(part.convert("RGB"))
        grid = px["image_grid_thw"][0, 1:] if "image_grid_thw" in px else px["image_sizes"]
        images.append((px["pixel_values"], tuple(grid.tolist())))
    ours = fp32.forward(place(enc.spans)).logits.double()
    theirs = remote_reference.kimi_vl_logits(shaped(name), ids, images)
    assert float((ours - theirs).abs().max()) <= 1e-4 * float(theirs.abs().max())
    assert kl(theirs.float(), ours.float()) <= 1e-9
    assert int(ours.argmax()) == int(theirs.argmax())


def test_relocation_is_exact_and_moves_the_rotary_channel_only(fp32):
    at = prefills_of_b(fp32, (0, 1, 100, 1000))
    base = at[0]
    k = rotary(fp32)
    for delta in (1, 100, 1000):
        moved = relocate(base, delta)
        assert rel_err(moved, at[delta], k) <= 1e-5, delta
        assert all(m[1 - k] is c[1 - k] for m, c in zip(moved.layers, base.layers, strict=True))
    # layer 0 against float64 angles: what remains above is the model's own float32 angle rounding
    spec = fp32.specs[k].rotary
    keys0 = base.layers[0][k].double()
    unroped = torch.stack([rotate(keys0[t], -t, spec) for t in range(base.n_tokens)])
    exact = torch.stack([rotate(unroped[t], 1000 + t, spec) for t in range(base.n_tokens)])
    assert float((relocate(base, 1000).layers[0][k].double() - exact).norm() / exact.norm()) <= 1e-6


@pytest.fixture
def ctx(remote, name):
    """The item's shared forwards, once per loaded model (full-rank and oracle tests both read them)."""
    return remote.build(name, "float32", "context", lambda adapter: ReuseContext(prepare(adapter), spans(adapter)))


def test_full_rank_patch_is_re_prefill_and_rank_zero_is_blind(ctx):
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-4
    full = ctx.patch.apply(ctx.relocated)
    for c in range(2):
        assert rel_err(full, ctx.conditioned, c) <= 1e-5
    kl_full = kl(ctx.reprefill_logits, ctx.query(full).logits)
    assert eta(kl_full, kl_blind) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits, ctx.blind.logits)


def test_oracle_equals_blind_with_the_canonical_at_native_positions(ctx):
    native = ReuseContext(ctx.adapter, ctx.enc, canonical_context="native")
    assert native.delta == 0
    for c in range(2):
        assert rel_err(native.oracle_b, native.canonical, c) <= 1e-5
    torch.testing.assert_close(native.blind.logits, native.oracle.logits, rtol=0, atol=1e-4)


def test_image_token_layout(fp32):
    image = noise_image(3, 84).crop((0, 0, 84, 56))
    piece = fp32._vision(image)
    n = int(torch.tensor(piece.visual).sum())
    if fp32.family == "kimi_vl":
        # 84×56 is already a multiple of 28: a 6×4 patch grid, 3×2 merged tokens
        assert n == 6 == fp32.image_processor.n_tokens(image)
        head = [163602, *fp32.tokenize("image"), 163603]
        assert piece.ids == [*head, *[163605] * n, 163604]
        assert piece.visual == [False] * len(head) + [True] * n + [False]
    else:
        # one 336×336 crop: (1·1 + 1)·144 + 1 + (1 + 1)·12 = 313 image tokens, all <|image|>
        assert n == len(piece.ids) == 313 and set(piece.ids) == {32044}
        model = fp32.model
        proj = model.img_projection
        newline, separator = proj(model.sub_GN.reshape(1, -1))[0], proj(model.glb_GN.reshape(1, -1))[0]
        rows = piece.features
        # crop rows of 12 + newline, then the separator, then the global rows of 12 + newline
        for r in range(12):
            torch.testing.assert_close(rows[r * 13 + 12], newline)
            torch.testing.assert_close(rows[157 + r * 13 + 12], newline)
        torch.testing.assert_close(rows[156], separator)
        assert not torch.allclose(rows[0], newline)


def test_encoding_past_the_short_rope_range_is_refused(fp32):
    if fp32.family != "phi3_v":
        pytest.skip("LongRoPE switch: Phi-3.5-V only")
    item = [Span("A", ("a",)), Span("B", ("1 " * 4200,)), Span("query", ("q",))]
    with pytest.raises(ValueError, match="context of 4096"):
        fp32.encode(item)


# ----- bfloat16 --------------------------------------------------------------------------------------------
@pytest.mark.full
def test_relocation_in_bf16_within_a_few_ulps_at_layer_zero(bf16):
    """As the tiny families: the model rounds cos, sin and cos·k + sin·rot(k) to bf16 at each position, so
    its own layer-0 keys at p and p + δ differ from an exact rotation of the stored bf16 keys by up to
    two ulps of the head's largest key (Kimi-VL, as the tiny families), four with Phi-3.5-V's LongRoPE
    scaling: its ×1.19 is folded into cos and sin before they are rounded, so the products and their sum
    can reach the binade above the stored keys' and each of their roundings costs up to one ulp at the
    head's scale (three seen with N(0, 0.02) weights, four with the shaped writer's fixed-exponent ones).
    The float32 test above shows the rotation itself is exact."""
    at = prefills_of_b(bf16, (0, 1, 100, 3000))
    k = rotary(bf16)
    for delta in (1, 100, 3000):
        target = at[delta].layers[0][k].float()
        err = (relocate(at[0], delta).layers[0][k].float() - target).abs()
        bound = 4.0 if bf16.family == "phi3_v" else 2.0
        assert float((err / bf16_ulp(target.abs().amax(-1, keepdim=True))).max()) <= bound, delta


@pytest.mark.full
def test_patch_bytes_in_the_models_own_layout(bf16):
    """Bytes at ranks 16 / 64 against B's page. MLA (n_B ≈ 576): c_KV costs m·(n_B + 512) and k_pe
    r·(n_B + 64) per layer, with r = m (one rank for every channel) or r = ⌈m/4⌉ (k_pe at a quarter
    rank): 8.3% / 33.3% or 6.0% / 24.1% of the 576-wide page; the paper's 6% / 25% is the latter.
    MHA: m·(n_B + 3072) per layer and channel against n_B·6144."""
    if bf16.family == "kimi_vl":
        item = [Span("A", ("the key is red.",)), Span("B", (noise_image(4, 672),)), Span("query", ("Which? Answer:",))]
    else:
        item = spans(bf16)
    ctx = ReuseContext(bf16, item)
    n, layers = ctx.n_b, bf16.n_layers
    page = layers * n * sum(s.width for s in bf16.specs) * 2
    assert ctx.page_bytes() == page
    for m in (16, 64):
        patch = ctx.patch.truncate(m)
        if bf16.family == "kimi_vl":
            assert 576 <= n <= 600
            content = layers * m * (n + 512) * 2
            rope = {r: layers * r * (n + 64) * 2 for r in (m, math.ceil(m / 4))}
            assert patch.nbytes() in {content + b for b in rope.values()}
            quarter = (content + rope[math.ceil(m / 4)]) / page
            assert quarter == pytest.approx({16: 0.060, 64: 0.241}[m], abs=0.005)
        else:
            assert patch.nbytes() == layers * 2 * m * (n + 3072) * 2
        assert patch.bytes_fraction(ctx.conditioned) == pytest.approx(patch.nbytes() / page)
