"""Adapters reproduce each family's own forward: span-wise encoding, positions, splice control."""

from __future__ import annotations

import pytest
import torch
from tinyfamilies import TINY, noise_image, standard_spans

from kamera.items.spans import Span, validate_spans
from kamera.models import CheckpointNotFoundError, UnknownModelError, checkpoint_path, load_model, place
from kamera.reuse.context import ReuseContext

MULTIMODAL = [n for n in TINY if n not in ("tiny_deepseek_v2", "tiny_gemma3")]  # the text-only twins


def model_inputs(adapter, spans):
    """The family's own top-level inputs for the concatenated item (ids + pixels of every image)."""
    enc = adapter.encode(spans)
    ids = torch.cat([s.input_ids for s in enc.spans])[None]
    images = [p for s in spans for p in s.parts if not isinstance(p, str)]
    pix = [adapter._pixels(im) for im in images]
    kwargs = {"pixel_values": torch.cat([p["pixel_values"] for p in pix])}
    if "image_grid_thw" in pix[0]:
        kwargs["image_grid_thw"] = torch.cat([p["image_grid_thw"] for p in pix])
    if adapter.position_rows == 3:
        kwargs["mm_token_type_ids"] = (ids == adapter.model.config.image_token_id).int()
    kwargs["attention_mask"] = torch.ones_like(ids)  # Qwen3-Omni builds its M-RoPE index only when given a mask
    return enc, ids, kwargs


@pytest.mark.parametrize("name", MULTIMODAL)
def test_spanwise_encoding_matches_the_models_own_forward(tiny, name):
    """Vision features merged per image + explicit positions = the model's own multimodal forward."""
    adapter = tiny(name)
    spans = standard_spans(adapter)
    enc, ids, kwargs = model_inputs(adapter, spans)
    with torch.no_grad():
        ref = adapter.model(input_ids=ids, **kwargs).logits[0, -1].float()
    ours = adapter.forward(place(enc.spans)).logits
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "name", ["tiny_qwen2_5_vl", "tiny_qwen3_vl", "tiny_qwen3_vl_moe", "tiny_qwen3_omni", "tiny_qwen2_5_omni"]
)
def test_mrope_positions_compose_per_span(tiny, name):
    """Each span's rope index alone, offset by the previous spans' extents, is the whole item's index."""
    adapter = tiny(name)
    enc, ids, kwargs = model_inputs(adapter, standard_spans(adapter))
    whole = adapter._rope_index(ids, kwargs["mm_token_type_ids"], kwargs["image_grid_thw"], None, None)
    ours = torch.cat([s.local_pos + start for s, start in place(enc.spans)], dim=-1)
    assert torch.equal(ours, whole[:, 0])
    assert enc.spans[1].local_pos.shape[0] == 3 and not torch.equal(
        enc.spans[1].local_pos[1], enc.spans[1].local_pos[0]
    )


@pytest.mark.parametrize("name", TINY)
def test_splice_control_reproduces_the_full_prefill(tiny, name):
    """Slices of one full prefill put back into a fresh cache give the full-prefill query logits."""
    ctx = ReuseContext(tiny(name), standard_spans(tiny(name)))
    spliced = ctx.query(ctx.conditioned).logits
    torch.testing.assert_close(spliced, ctx.reprefill_logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", TINY)
def test_channel_layout_per_family(tiny, name):
    adapter = tiny(name)
    names = [s.name for s in adapter.specs]
    if adapter.attention == "MLA":
        assert names == ["c_kv", "k_pe"] and adapter.specs[0].rotary is None and adapter.specs[0].width >= 128
        assert adapter.specs[1].rotary.layout == ("interleaved" if adapter.family == "deepseek_v2" else "half")
    else:
        assert names == ["k", "v"] and adapter.specs[1].rotary is None and adapter.specs[1].width >= 128
        assert adapter.specs[0].rotary.rotary_dim == adapter.specs[0].dim


def test_greedy_decode_continues_positions(tiny):
    adapter = tiny("tiny_qwen2_5_vl")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    out = ctx.query(ctx.conditioned)
    length = out.cache.get_seq_length()
    tokens = adapter.greedy(out, max_new_tokens=4)
    assert len(tokens) <= 4 and tokens[0] == int(ctx.reprefill_logits.argmax())
    assert out.cache.get_seq_length() == length  # decoding never grows the arm's own cache
    # the same decode from a plain full prefill cache agrees token for token
    assert adapter.greedy(ReuseContext(adapter, standard_spans(adapter)).full, max_new_tokens=4) == tokens


# ----- bad input ---------------------------------------------------------------------------------
def test_empty_b_span_is_an_error(tiny):
    adapter = tiny("tiny_llava")
    spans = standard_spans(adapter)
    spans[-2] = Span("B", ("",))
    with pytest.raises(ValueError, match="B span is empty"):
        adapter.encode(spans)


def test_item_without_b_or_query_is_an_error():
    with pytest.raises(ValueError, match="exactly one B"):
        validate_spans([Span("A", ("x",)), Span("query", ("q",))])
    with pytest.raises(ValueError, match="query"):
        validate_spans([Span("A", ("x",)), Span("B", ("y",))])
    with pytest.raises(ValueError, match="directly precede"):
        validate_spans([Span("B", ("y",)), Span("A", ("x",)), Span("query", ("q",))])
    with pytest.raises(ValueError, match="role"):
        Span("C", ("x",))
    with pytest.raises(TypeError):
        Span("A", "not a tuple")


def test_span_longer_than_the_context_is_an_error(tiny):
    adapter = tiny("tiny_deepseek_v2")
    spans = [Span("A", ("a",)), Span("B", ("x" * 9000,)), Span("query", ("q",))]
    with pytest.raises(ValueError, match="context of 8192"):
        adapter.encode(spans)


def test_unknown_model_lists_the_registered_names():
    with pytest.raises(UnknownModelError, match="tiny_qwen2_5_vl"):
        load_model("qwen9_vl")


def test_missing_checkpoint_names_the_path_and_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("KAMERA_MODELS", str(tmp_path))
    with pytest.raises(CheckpointNotFoundError) as err:
        load_model("qwen2_5_vl_7b")
    msg = str(err.value)
    assert (
        str(tmp_path / "Qwen2.5-VL-7B-Instruct") in msg
        and "hf download Qwen/Qwen2.5-VL-7B-Instruct" in msg
        and "huggingface-cli" not in msg
    )
    with pytest.raises(CheckpointNotFoundError, match="/nowhere/ckpt"):
        load_model("llava_1_5_7b", path="/nowhere/ckpt")
    monkeypatch.delenv("KAMERA_MODELS")
    with pytest.raises(CheckpointNotFoundError, match="KAMERA_MODELS is not set"):
        checkpoint_path("qwen3_vl_8b")


def test_text_only_family_refuses_images(tiny):
    adapter = tiny("tiny_deepseek_v2")
    assert not adapter.reads_images
    with pytest.raises(NotImplementedError, match="does not take images"):
        adapter.encode_span(Span("B", (noise_image(0),)))


# ----- float32 logits ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi"])
def test_logits_are_an_fp32_head_on_a_bf16_model(tiny, name):
    """The LM head is applied in float32 (rows upcast in chunks): equal to an fp32 head on the bf16
    weights to 1e-6, where the bf16 head the model would apply itself is off by far more."""
    import torch.nn.functional as F

    from kamera.models import base

    adapter = tiny(name, "bfloat16")
    enc = adapter.encode(standard_spans(adapter))
    with torch.no_grad():
        h = adapter.lm(
            inputs_embeds=torch.cat([s.embeds for s in enc.spans])[None],
            position_ids=adapter.position_ids(torch.cat([s.local_pos + p for s, p in place(enc.spans)], -1)),
            use_cache=False,
        ).last_hidden_state[0, -1]
        exact = F.linear(h.float(), adapter.head.weight.float())
        bf16_head = adapter.head(h).float()
    chunk, base.HEAD_CHUNK_BYTES = base.HEAD_CHUNK_BYTES, {"cpu": 100 * 4 * h.numel(), "other": 1}
    try:
        ours = adapter.logits(h)  # 100 rows at a time: six chunks on a 512-token vocabulary
    finally:
        base.HEAD_CHUNK_BYTES = chunk
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, exact, rtol=0, atol=1e-6)
    assert float((bf16_head - exact).abs().max()) > 1e-4
    assert torch.equal(adapter.forward(place(enc.spans)).logits, adapter.logits(h))
