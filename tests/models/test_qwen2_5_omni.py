"""The Qwen2.5-Omni thinker on audio chunks: the tiny twin (unmarked, fast) and the shaped checkpoint (``shaped``).

In float32, with an audio B: span-wise encoding is the thinker's own forward on the same audio (its feature
extractor, audio tower and rope index); relocation on the audio tokens is exact; the full-rank patch is re-prefill
(η ≥ 0.999) and rank 0 is blind reuse; the 4D-mask oracle is blind reuse with the canonical at native positions.
Bad audio (another sample rate, too long, too short, a model without an audio tower) is a one-line error.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch
from shaped_support import content, need_real_tokenizer, prefill_alone, rotary
from tinyfamilies import noise_image

from kamera.core import ChunkKV, relocate
from kamera.items.spans import Audio, Span
from kamera.metrics import eta, kl
from kamera.models import load_model, place
from kamera.reuse.context import ReuseContext

RATE = 16000


def tone(hz: float, seconds: float = 0.6, seed: int = 0) -> Audio:
    t = np.arange(round(seconds * RATE)) / RATE
    noise = np.random.default_rng(seed).normal(0, 0.05, t.size)
    return Audio((0.4 * np.sin(2 * np.pi * hz * t) + noise).astype(np.float32), RATE)


def audio_item() -> list[Span]:
    """[prefix, A (text keys), B (text + audio + text), query]."""
    return [
        Span("prefix", ("Keys give each sound a colour.",)),
        Span("A", ("Key: the low tone means red; the high tone means blue.",)),
        Span("B", ("Recording: ", tone(880.0), " (end of recording)")),
        Span("query", ("Which colour does the recording mean? A. red B. blue. Answer:",)),
    ]


def rel_err(a: ChunkKV, b: ChunkKV, channel: int, rows: torch.Tensor | None = None) -> float:
    """Worst layer of ‖a − b‖ / ‖b‖ on one channel (over ``rows`` of the chunk if given)."""
    out = 0.0
    for x, y in zip(a.layers, b.layers, strict=True):
        u, v = x[channel].double(), y[channel].double()
        if rows is not None:
            u, v = u[rows], v[rows]
        out = max(out, float((u - v).norm() / v.norm()))
    return out


def native_of(ctx: ReuseContext) -> ReuseContext:
    native = ReuseContext(ctx.adapter, ctx.enc, canonical_context="native")
    native.__dict__["full"] = ctx.full
    native.__dict__["oracle"] = ctx.oracle
    return native


def check_identities(adapter) -> None:
    """The four identities on an audio B, in float32."""
    ctx = ReuseContext(adapter, audio_item())
    b = ctx.enc.spans[ctx.b]
    audio_rows = b.input_ids == adapter.model.config.audio_token_id
    assert int(audio_rows.sum()) > 10 and torch.equal(b.visual, audio_rows)
    base = prefill_alone(adapter, b, 0)
    moved = relocate(base, 113)
    at = prefill_alone(adapter, b, 113)
    k, v = rotary(adapter), content(adapter)
    assert rel_err(moved, at, k, audio_rows) <= 1e-5 and rel_err(moved, at, k) <= 1e-5
    assert all(m[v] is x[v] for m, x in zip(moved.layers, base.layers, strict=True))
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-7
    full = ctx.patch.apply(ctx.relocated)
    assert all(rel_err(full, ctx.conditioned, c) <= 1e-5 for c in range(2))
    assert eta(kl(ref, ctx.query(full).logits), kl_blind) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).hidden, ctx.blind.hidden)
    native = native_of(ctx)
    assert native.delta == 0
    torch.testing.assert_close(native.blind.hidden, native.oracle.hidden, rtol=1e-4, atol=1e-4)


def own_forward_hidden(adapter, spans: list[Span]) -> tuple[torch.Tensor, torch.Tensor]:
    """(ours, the thinker's own): the last hidden state of the whole item through span-wise encoding and explicit
    positions, and through the thinker model's forward on the input ids and the audio's features (audio tower,
    merge and positions its own; the input rows are the adapter's, an upcast of the stored embeddings)."""
    enc = adapter.encode(spans)
    ids = torch.cat([s.input_ids for s in enc.spans])[None]
    audio = next(p for s in spans for p in s.parts if isinstance(p, Audio))
    feats = adapter.feature_extractor(audio.samples, sampling_rate=RATE, return_attention_mask=True,
                                      return_tensors="pt")
    with torch.no_grad():
        ref = adapter.model.model(
            input_ids=ids,
            inputs_embeds=adapter.embed(ids),
            input_features=feats["input_features"],
            feature_attention_mask=feats["attention_mask"],
            attention_mask=torch.ones_like(ids),
        )
    return adapter.forward(place(enc.spans)).hidden, ref.last_hidden_state[0, -1]


# ----- the tiny twin (fast) ----------------------------------------------------------------------------------
def test_audio_span_is_the_thinkers_own_forward(tiny):
    adapter = tiny("tiny_qwen2_5_omni")
    ours, ref = own_forward_hidden(adapter, audio_item())
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-5)


def test_audio_tokens_and_tmrope_positions(tiny):
    """0.6 s = 60 mel frames → 15 audio tokens (one per 40 ms) between <|audio_bos|> and <|audio_eos|>, on
    consecutive positions, the same on all three M-RoPE rows; a span with an image and audio composes."""
    adapter = tiny("tiny_qwen2_5_omni")
    cfg = adapter.model.config
    enc = adapter.encode_span(Span("B", ("x", tone(440.0))))
    assert enc.input_ids.tolist() == [
        *adapter.tokenize("x"),
        cfg.audio_start_token_id,
        *[cfg.audio_token_id] * 15,
        cfg.audio_end_token_id,
    ]
    assert torch.equal(enc.local_pos, torch.arange(enc.n_tokens)[None].expand(3, -1)) and enc.extent == enc.n_tokens
    mixed = adapter.encode_span(Span("B", (noise_image(1), "and", tone(440.0))))
    audio = mixed.input_ids == cfg.audio_token_id
    pos = mixed.local_pos[:, audio]
    assert torch.equal(pos[0], pos[1]) and torch.equal(pos[0], pos[0][0] + torch.arange(15))
    first = int(audio.nonzero()[0])  # the audio follows the image block, the text and <|audio_bos|>
    assert int(pos[0][0]) == int(mixed.local_pos[:, :first].max()) + 1


def test_audio_identities_on_the_tiny_twin(tiny):
    check_identities(tiny("tiny_qwen2_5_omni"))


def test_bad_audio_is_a_clear_error(tiny):
    adapter = tiny("tiny_qwen2_5_omni")
    low = Audio(np.zeros(8000, np.float32), 8000)
    with pytest.raises(ValueError, match="8000 Hz, but its feature extractor reads 16000 Hz"):
        adapter.encode_span(Span("B", (low,)))
    with pytest.raises(ValueError, match="exceeds the feature extractor's 30 s window"):
        adapter.encode_span(Span("B", (Audio(np.zeros(31 * RATE, np.float32), RATE),)))
    with pytest.raises(ValueError, match="encodes to no audio token"):
        adapter.encode_span(Span("B", (Audio(np.zeros(16, np.float32), RATE),)))
    with pytest.raises(NotImplementedError, match="does not take audio"):
        tiny("tiny_qwen2_5_vl").encode_span(Span("B", (tone(440.0),)))


# ----- the shaped checkpoint ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shaped_omni(shaped_root):
    need_real_tokenizer("qwen2_5_omni_7b")
    adapter = load_model("qwen2_5_omni_7b", models_root=shaped_root("qwen2_5_omni_7b"), dtype="float32")
    yield adapter
    del adapter
    gc.collect()


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_reads_the_checkpoints_feature_extractor_and_specials(shaped_omni):
    fe, cfg = shaped_omni.feature_extractor, shaped_omni.model.config
    assert (fe.feature_size, fe.sampling_rate, fe.hop_length, fe.n_samples) == (128, 16000, 160, 300 * 16000)
    ids = shaped_omni.tokenizer.convert_tokens_to_ids(["<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<|IMAGE|>"])
    assert ids == [cfg.audio_token_id, cfg.audio_start_token_id, cfg.audio_end_token_id, cfg.image_token_id]
    assert shaped_omni.n_layers == 2 and shaped_omni.model.model.audio_tower.conv1.in_channels == 128


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_audio_span_is_the_thinkers_own_forward(shaped_omni):
    ours, ref = own_forward_hidden(shaped_omni, audio_item())
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_audio_identities(shaped_omni):
    check_identities(shaped_omni)


def test_video_frames_take_the_processors_budget_without_a_video_config(tiny, tmp_path):
    """A checkpoint without video_preprocessor_config.json resizes frames within Qwen2_5OmniProcessor's video
    budget (128·28² .. 768·28² pixels), not its image budget; with one, the stated budget."""
    from kamera.models.qwen_omni import VIDEO_PIXELS

    adapter = tiny("tiny_qwen2_5_omni")
    adapter.checkpoint = tmp_path
    try:
        h, w = adapter._frame_size(4, 1080, 1920)
        assert VIDEO_PIXELS[0] <= h * w <= VIDEO_PIXELS[1] and h % 28 == 0 and w % 28 == 0 and w > h
        (tmp_path / "video_preprocessor_config.json").write_text("{}")
        h, w = adapter._frame_size(4, 1080, 1920)
        assert h * w <= adapter.image_processor.size["longest_edge"]
    finally:
        adapter.checkpoint = None
