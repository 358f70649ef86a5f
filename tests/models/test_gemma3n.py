"""Gemma-3n (kamera.models.gemma3n): per-layer inputs carried per span, sliding-window layers with a B longer than the
window, KV-shared layers reading their source layer's relocated and patched KV, soft-capped logits; image chunks
through the native MobileNetV5 tower (boi + soft tokens + eoi, the eoi embedded by ``embed_vision``).

The tiny twin (window 16, 6 layers: sliding / global alternating, the last 2 KV-shared; a 16-token image tower) runs
in ``make test``; the shaped E4B checkpoint (the published 262k vocabulary and 2048 × 16384 layers, MobileNetV5 at
768 px with each stage cut to 3 blocks) at 4 layers, so it has KV-shared layers, with a B longer than the real
512-slot window, is in the ``shaped`` tier.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from PIL import Image
from sliding_support import (
    B_TEXT,
    alone,
    assert_the_query_reads_only_rows_inside_the_window,
    rel_err,
    spans,
)

from kamera.core import ChunkKV, relocate, rotate
from kamera.items.spans import Audio, Span
from kamera.metrics import eta, kl
from kamera.models import image_problems, load_model, place
from kamera.models.gemma3n import AUDIO_REASON
from kamera.models.shaped import ensure
from kamera.reuse.context import ReuseContext


def noise_image(seed: int, size: tuple[int, int] = (90, 120)) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (*size, 3), dtype=np.uint8))


def image_spans(b_text: str = B_TEXT) -> list[Span]:
    """[prefix, A (image + text), A (text), B (image + text), query]: B's image and text outrun the window."""
    return [
        Span("prefix", ("Answer with one letter.",)),
        Span("A", (noise_image(1), "The key is under this cup.")),
        Span("A", ("The coin is under the blue cup.",)),
        Span("B", (noise_image(2, (200, 140)), b_text)),
        Span("query", ("Which cup hides the key? A, B, C or D.",)),
    ]


def image_identities(adapter, ctx: ReuseContext, kl_floor: float) -> None:
    """The operator's identities on an item whose B holds an image: relocation exact, full rank = re-prefill
    (η ≥ 0.999), rank 0 = blind, and B ↛ A = blind at native positions."""
    b = ctx.enc.spans[ctx.b]
    assert bool(b.visual.any())
    base = alone(adapter, b.span, 0)
    assert rel_err(relocate(base, 97), alone(adapter, b.span, 97), 0) <= 1e-5
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > kl_floor
    full = ctx.patch.apply(ctx.relocated)
    assert eta(kl(ref, ctx.query(full).logits), kl_blind) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits, ctx.blind.logits)
    native = ReuseContext(adapter, ctx.enc, canonical_context="native")
    torch.testing.assert_close(native.oracle.hidden, native.blind.hidden, rtol=1e-4, atol=1e-4)


def captured_shared_kv(adapter, ctx: ReuseContext, b_kv: ChunkKV, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The K / V a KV-shared ``layer`` attends in the query forward on [prefix · A · b_kv] ([1, heads, S, dim])."""
    seen = {}
    attn = adapter.lm.layers[layer].self_attn

    def hook(module, args, kwargs):
        seen["kv"] = tuple(t.clone() for t in kwargs["shared_kv_states"][attn.layer_type])

    handle = attn.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        ctx.query(b_kv)
    finally:
        handle.remove()
    return seen["kv"]


# ----- tiny twin -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def twin(tiny):
    return tiny("tiny_gemma3n")


@pytest.fixture(scope="module")
def ctx(twin):
    c = ReuseContext(twin, spans())
    assert c.n_b > twin.window  # B outruns the sliding window
    return c


def test_layout_kv_shared_layers_own_no_cache(twin, ctx):
    """A chunk holds the 4 layers that own a cache (6 − 2 KV-shared); the shared layers' cache entries stay empty;
    the K channel rotates each layer with its type's θ (sliding 10⁴, global 10⁶)."""
    assert twin.n_layers == 4 and ctx.conditioned.n_layers == 4
    assert [type(layer).__name__ for layer in ctx.full.cache.layers[4:]] == ["DummyLayer", "DummyLayer"]
    k = twin.specs[0]
    assert [float(s.inv_freq[1]) for s in k.per_layer[:2]] == pytest.approx([10_000 ** (-2 / 64), 1e6 ** (-2 / 64)])
    assert k.rotary is k.per_layer[0]


def test_per_layer_inputs_and_soft_cap_are_the_models_own(twin, ctx):
    """Span-wise embeds + per-layer inputs from each span's ids + explicit positions = the model's own forward from
    ids (which caps its logits at 30); without the token-identity rows the logits move."""
    ids = torch.cat([s.input_ids for s in ctx.enc.spans])[None]
    with torch.no_grad():
        ref = twin.model(input_ids=ids).logits[0, -1].float()
        bare = twin.lm(inputs_embeds=torch.cat([s.embeds for s in ctx.enc.spans])[None]).last_hidden_state[0, -1]
    torch.testing.assert_close(ctx.reprefill_logits, ref, rtol=0, atol=1e-5)
    assert float(ref.abs().max()) < 30.0
    assert float((twin.logits(bare) - ref).abs().max()) > 1e-3


def test_relocation_is_exact_per_layer_type(twin, ctx):
    """B alone moved by R(δ) = B alone at +δ on every layer (sliding and global turn with their own θ); layer 0
    matches a float64-angle rotation; rotating the global layer with the sliding θ would not."""
    b = ctx.enc.spans[ctx.b].span
    base = alone(twin, b, 0)
    for delta in (1, 97):
        moved = relocate(base, delta)
        assert rel_err(moved, alone(twin, b, delta), 0) <= 1e-5
        assert all(m[1] is x[1] for m, x in zip(moved.layers, base.layers, strict=True))
    spec = twin.specs[0].rotary_at(0)
    keys0 = base.layers[0][0].double()
    exact = torch.stack([rotate(rotate(keys0[t], -t, spec), 500 + t, spec) for t in range(base.n_tokens)])
    assert float((relocate(base, 500).layers[0][0].double() - exact).norm() / exact.norm()) <= 1e-6
    target = alone(twin, b, 97).layers[1][0].double()
    wrong = rotate(base.layers[1][0], 97, spec).double()  # layer 1 is global
    assert float((wrong - target).norm() / target.norm()) > 1e-2


def test_full_rank_is_re_prefill_and_rank_zero_is_blind(ctx):
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-4
    full = ctx.patch.apply(ctx.relocated)
    assert all(rel_err(full, ctx.conditioned, c) <= 1e-5 for c in range(2))
    assert eta(kl(ref, ctx.query(full).logits), kl_blind) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits, ctx.blind.logits)


def test_oracle_equals_blind_at_native_positions_though_b_outruns_the_window(twin, ctx):
    """B ↛ A with each sliding row's window counted over the columns it may attend = B as if A were absent; the
    4D mask handed to every layer as it is (no window on the sliding layers) is not."""
    native = ReuseContext(twin, ctx.enc, canonical_context="native")
    assert native.delta == 0
    assert all(rel_err(native.oracle_b, native.canonical, c) <= 1e-5 for c in range(2))
    torch.testing.assert_close(native.oracle.hidden, native.blind.hidden, rtol=1e-4, atol=1e-4)
    mask = torch.zeros(1, 1, *native.oracle_mask().shape).masked_fill(
        ~native.oracle_mask(), torch.finfo(torch.float32).min
    )
    placed = place(native.enc.spans)
    with torch.no_grad():
        windowless = twin.lm(
            inputs_embeds=torch.cat([s.embeds for s, _ in placed])[None],
            position_ids=torch.cat([s.local_pos + p for s, p in placed], dim=-1),
            attention_mask=mask,
            cache=twin.new_cache(),
            **twin._forward_extras(placed),
        )
    assert float((windowless.last_hidden_state[0, -1] - native.blind.hidden).abs().max()) > 1e-3


def test_sliding_layers_keep_b_whole_and_the_query_never_reads_what_fell_out_of_the_window(twin, ctx):
    """Every row of B is kept, relocated and patched at every layer; at a sliding layer, B's rows window − 1 or more
    slots behind the query are not read by it (corrupting them leaves the logits bit-identical), the rows inside
    the window and every row at a global layer are."""
    assert all(t.shape[0] == ctx.n_b for chans in ctx.relocated.layers for t in chans)
    assert_the_query_reads_only_rows_inside_the_window(twin, ctx, read=1e-3)


def test_kv_shared_layers_attend_their_source_layers_patched_kv(twin, ctx):
    """Layer 5 (global, KV-shared) attends exactly layer 3's spliced K / V: a rank-4 patch on B at layer 3 is what
    it reads; layer 4 (sliding) attends layer 2's last window − 1 rows plus the query's."""
    patched = ctx.patch.truncate(4).apply(ctx.relocated)
    b0, b1 = ctx.ranges[ctx.b]
    k, v = captured_shared_kv(twin, ctx, patched, 5)
    assert torch.equal(k[0, :, b0:b1].transpose(0, 1), patched.layers[3][0])
    assert torch.equal(v[0, :, b0:b1].transpose(0, 1), patched.layers[3][1])
    k, _ = captured_shared_kv(twin, ctx, patched, 4)
    n_q = ctx.enc.spans[ctx.q].n_tokens
    assert k.shape[2] == twin.window - 1 + n_q
    assert torch.equal(k[0, :, : twin.window - 1].transpose(0, 1), patched.layers[2][0][-(twin.window - 1) :])


def test_greedy_decode_carries_per_layer_inputs(twin, ctx):
    """Greedy decoding on a spliced cache = on the full prefill = transformers' own generate from the ids."""
    ids = torch.cat([s.input_ids for s in ctx.enc.spans])[None]
    tokens = twin.greedy(ctx.query(ctx.conditioned), max_new_tokens=4)
    assert tokens == twin.greedy(ctx.full, max_new_tokens=4)
    with torch.no_grad():
        own = twin.model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=None)[0, ids.shape[1] :]
    assert tokens == own.tolist()


def test_bad_inputs_are_refused(twin, ctx):
    with pytest.raises(NotImplementedError, match="audio chunks are refused"):
        twin.encode_span(Span("B", (Audio(np.zeros(1600, dtype=np.float32), 16000),)))
    top = twin.text_config.vocab_size_per_layer_input
    twin.text_config.vocab_size_per_layer_input = 100
    try:
        with pytest.raises(ValueError, match="soft tokens"):
            twin.tokenize("zzz")  # byte ids above 100
    finally:
        twin.text_config.vocab_size_per_layer_input = top
    q = ctx.enc.spans[ctx.q]
    total = ctx.ranges[ctx.q][1]
    early = torch.full((1, 1, q.n_tokens, total), torch.finfo(torch.float32).min)
    early[..., :10] = 0.0  # rows that may attend only the first 10 slots: long evicted from a sliding cache
    with pytest.raises(ValueError, match="sliding layer"):
        twin.forward([(q, ctx.start(ctx.q))], cache=ctx.splice(ctx.conditioned), mask=early)
    with pytest.raises(ValueError, match="4D mask of shape"):
        twin.forward([(q, ctx.start(ctx.q))], cache=ctx.splice(ctx.conditioned), mask=early[..., 1:])


def test_image_benchmarks_pass_preflight():
    """Gemma-3n reads images now: preflight has nothing to say about an image benchmark; audio is refused by name."""
    assert image_problems("gemma3n_e4b", None, "synthetic", [lambda: [Span("B", (Image.new("RGB", (8, 8)),))]]) == []
    assert "audio" in AUDIO_REASON


# ----- image chunks on the tiny twin ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def image_ctx(twin):
    c = ReuseContext(twin, image_spans())
    assert c.n_b > twin.window
    return c


def test_image_layout_is_the_processors(twin, image_ctx):
    """An image is ``\\n\\n`` <start_of_image> + 16 soft tokens + <end_of_image> ``\\n\\n``, the soft tokens carrying
    the tower's features and <end_of_image> embedded by embed_vision's hard embedding (not the text table)."""
    cfg = twin.model.config
    b = image_ctx.enc.spans[image_ctx.b]
    gap = twin.tokenize("\n\n")
    n = cfg.vision_soft_tokens_per_image
    assert b.input_ids[: len(gap) * 2 + n + 2].tolist() == [
        *gap,
        cfg.boi_token_id,
        *[cfg.image_token_id] * n,
        cfg.eoi_token_id,
        *gap,
    ]
    assert b.visual.tolist()[: len(gap) + n + 2] == [False] * (len(gap) + 1) + [True] * n + [False]
    eoi = len(gap) + n + 1
    with torch.no_grad():
        hard = twin.model.model.embed_vision(input_ids=torch.tensor([[cfg.eoi_token_id]]))[0, 0]
    assert torch.equal(b.embeds[eoi], hard)
    assert not torch.allclose(hard, twin.lm.get_input_embeddings()(torch.tensor(cfg.eoi_token_id)))


def test_image_spans_are_the_models_own_forward(twin, image_ctx):
    """Span-wise encoding (features merged once, per-layer inputs from each span's ids) = the model's own forward from
    ids and pixel values (its get_image_features, placeholder scatter and vision-band embedding)."""
    ids = torch.cat([s.input_ids for s in image_ctx.enc.spans])[None]
    images = [p for s in image_spans() for p in s.parts if isinstance(p, Image.Image)]
    pixels = torch.cat([twin._pixels(im)["pixel_values"] for im in images])  # [2, 3, 128, 128]
    with torch.no_grad():
        ref = twin.model(input_ids=ids, pixel_values=pixels).logits[0, -1].float()
    torch.testing.assert_close(image_ctx.reprefill_logits, ref, rtol=0, atol=1e-5)


def test_image_chunk_identities(twin, image_ctx):
    image_identities(twin, image_ctx, kl_floor=1e-4)


# ----- the shaped E4B checkpoint, 4 layers (2 KV-shared), B longer than the 512-slot window --------------------
@pytest.fixture(scope="module")
def shaped(shaped_cache):
    adapter = load_model("gemma3n_e4b", models_root=ensure("gemma3n_e4b", shaped_cache, layers=4), dtype="float32")
    yield adapter
    del adapter
    gc.collect()


@pytest.fixture(scope="module")
def long_ctx(shaped):
    c = ReuseContext(shaped, spans(" ".join([B_TEXT] * 7)))
    assert c.n_b > shaped.window and shaped.n_layers == 2
    return c


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_identities_with_a_b_longer_than_the_window(shaped, long_ctx):
    ctx = long_ctx
    b = ctx.enc.spans[ctx.b]
    base = alone(shaped, b.span, 0)
    assert rel_err(relocate(base, 97), alone(shaped, b.span, 97), 0) <= 1e-5
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    full = ctx.patch.apply(ctx.relocated)
    assert kl_blind > 1e-6 and eta(kl(ref, ctx.query(full).logits), kl_blind) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits, ctx.blind.logits)
    native = ReuseContext(shaped, ctx.enc, canonical_context="native")
    native.__dict__["full"] = ctx.full
    torch.testing.assert_close(native.oracle.hidden, native.blind.hidden, rtol=1e-4, atol=1e-4)


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_kv_shared_and_evicted_rows(shaped, long_ctx):
    ctx = long_ctx
    patched = ctx.patch.truncate(16).apply(ctx.relocated)
    b0, b1 = ctx.ranges[ctx.b]
    k, v = captured_shared_kv(shaped, ctx, patched, 3)  # layer 3: global, KV-shared, source layer 1
    assert torch.equal(k[0, :, b0:b1].transpose(0, 1), patched.layers[1][0])
    assert torch.equal(v[0, :, b0:b1].transpose(0, 1), patched.layers[1][1])
    out_of_window = torch.arange(ctx.n_b) < b1 - (shaped.window - 1) - b0
    new = [tuple(t.clone() for t in chans) for chans in ctx.conditioned.layers]
    for t in new[0]:  # layer 0: sliding
        t[out_of_window] += 3.0
    assert torch.equal(ctx.query(ctx.conditioned.with_layers(new)).logits, ctx.query(ctx.conditioned).logits)


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_image_chunk_identities(shaped):
    """A 768-px image through the shaped MobileNetV5 (256 soft tokens of 2048) in A and B, B's text outrunning the
    window: the same identities as text."""
    ctx = ReuseContext(shaped, image_spans(" ".join([B_TEXT] * 4)))  # B ends before position ~1k (fp32 p·θ: 1e-5)
    assert int(ctx.enc.spans[ctx.b].visual.sum()) == 256 and ctx.n_b > shaped.window
    image_identities(shaped, ctx, kl_floor=1e-6)


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_image_ids_are_the_template_and_the_processors(shaped):
    """Text + image + text in one user turn: the harness's ids equal the checkpoint's template, its
    <image_soft_token> expanded by Gemma3nProcessor's own full_image_sequence, tokenized."""
    import transformers as tf

    tok = shaped.tokenizer
    proc = tf.Gemma3nProcessor(
        feature_extractor=tf.Gemma3nAudioFeatureExtractor(),
        image_processor=shaped.image_processor,
        tokenizer=tok,
        image_seq_length=256,
    )
    message = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look."},
                {"type": "image"},
                {"type": "text", "text": "What is shown?"},
            ],
        }
    ]
    rendered = tok.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
    before, after = rendered.split(tok.image_token)
    header, footer = shaped.chat
    spans = [
        Span("A", (before[len(header) :],)),
        Span("B", (noise_image(3),)),
        Span("query", (after[: len(after) - len(footer)],)),
    ]
    ours = torch.cat([s.input_ids for s in shaped.encode(spans).spans]).tolist()
    assert (
        ours == tok(rendered.replace(tok.image_token, proc.full_image_sequence), add_special_tokens=False)["input_ids"]
    )


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_chat_framing_is_the_checkpoints_template(shaped):
    """The item's ids (header in the prefix, footer after the query) are the template's rendering of the same user
    text, tokenized: <bos>, <start_of_turn> 105 and <end_of_turn> 106 at Gemma's ids."""
    tok = shaped.tokenizer
    text = [Span("B", ("Look at the board.",)), Span("query", (" Which cup?",))]
    ours = torch.cat([s.input_ids for s in shaped.encode(text).spans]).tolist()
    message = [{"role": "user", "content": [{"type": "text", "text": "Look at the board. Which cup?"}]}]
    rendered = tok.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
    assert ours == tok(rendered, add_special_tokens=False)["input_ids"]
    assert ours[:2] == [2, 105] and 106 in ours and shaped.stop_ids() == (1, 106)
