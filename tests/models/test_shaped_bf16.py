"""Every native paper model's shaped checkpoint loaded in bf16 (the paper configs' dtype): relocation within one
ulp of exact; the chat framing against the checkpoint's own template and processor; video positions and
pixel layout for the Qwen families; and, where a float32 copy does not fit (``BF16_ONLY``), the identities at
bf16 precision. One model in memory at a time (the float32 tests in ``test_shaped.py`` run first)."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers as tf
from shaped_fixtures import shaped_marks
from shaped_support import (
    BF16_ONLY,
    clip,
    item_spans,
    native_shaped_models,
    need_real_tokenizer,
    picture,
    prefill_alone,
    rotary,
    video_item,
)

from kamera.core import relocate, rotate
from kamera.items.spans import Span
from kamera.metrics import eta, kl
from kamera.models import load_model
from kamera.models.base import place
from kamera.reuse.context import ReuseContext

pytestmark = [pytest.mark.shaped, pytest.mark.full]  # bf16 at real widths: make test-full
SHAPED = native_shaped_models()  # Kimi-VL and Phi-3.5-V: tests/models_remote (shaped_support.REMOTE)


@pytest.fixture(scope="module", params=[pytest.param(n, marks=shaped_marks(n)) for n in SHAPED])
def bf16(request, shaped_root):
    name = request.param
    need_real_tokenizer(name)
    adapter = load_model(name, models_root=shaped_root(name), dtype="bfloat16")
    yield adapter
    del adapter
    gc.collect()


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(1e-30))) - 7)


def head_scale_ulps(err: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest error in bf16 ulps at each token-head's scale (the ulp of its largest |value|)."""
    return float((err.abs() / bf16_ulp(ref.abs().amax(-1, keepdim=True))).max())


def test_relocation_in_bf16_is_one_ulp_from_exact(bf16):
    """In bf16, at layer 0 (keys depend on position only through RoPE), at each token-head's scale: B's keys
    moved by R(δ) are within one ulp of the exact rotation of the same keys (relocation adds one rounding),
    and within four of the model's own bf16 prefill at +δ, whose rotary rounds cos and sin to bf16 and so
    sits two to three ulps from exact itself."""
    adapter = bf16
    b = adapter.encode_span(item_spans(adapter.name)[-2])
    base = prefill_alone(adapter, b, 0)
    k = rotary(adapter)
    spec = adapter.specs[k].rotary
    keys = base.layers[0][k].double()
    delta = 1000
    moved = relocate(base, delta).layers[0][k].float()
    exact = torch.stack([rotate(keys[t], delta, spec) for t in range(base.n_tokens)]).float()
    assert head_scale_ulps(moved - exact, exact) <= 1.0
    target = prefill_alone(adapter, b, delta).layers[0][k].float()
    assert head_scale_ulps(moved - target, target) <= 4.0


# ----- identities where float32 does not fit ----------------------------------------------------------------
def test_identities_in_bf16_where_float32_does_not_fit(bf16):
    """Rank 0 is blind reuse (bit for bit); the full-rank patch closes the gap up to the bf16 rounding of its
    factors (η ≥ 0.99); the 4D-mask oracle is blind reuse at native positions to bf16 precision."""
    if bf16.name not in BF16_ONLY:
        pytest.skip(f"{bf16.name}: identities run in float32 (test_shaped.py)")
    ctx = ReuseContext(bf16, item_spans(bf16.name))
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-6
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).hidden, ctx.blind.hidden)
    assert eta(kl(ref, ctx.query(ctx.patch.apply(ctx.relocated)).logits), kl_blind) >= 0.99
    native = ReuseContext(bf16, ctx.enc, canonical_context="native")
    native.__dict__["oracle"] = ctx.oracle
    torch.testing.assert_close(native.blind.hidden.float(), native.oracle.hidden.float(), rtol=2e-2, atol=5e-2)


# ----- video layout (Qwen families) ----------------------------------------------------------------------
def test_video_positions_are_the_models_own(bf16):
    """Span-wise positions placed end to end = the model's rope index over the whole item, with the clips as
    videos (temporal patches; time rows scaled by seconds for Qwen2.5-VL and Omni, frame stamps for Qwen3-VL)."""
    if not bf16.takes_video:
        pytest.skip(f"{bf16.name} reads a clip's frames as images")
    enc = bf16.encode(video_item())
    ids = torch.cat([s.input_ids for s in enc.spans])[None]
    cfg = bf16.model.config
    pieces = [bf16._video(p) for s in video_item() for p in s.parts if not isinstance(p, str)]
    grids = torch.stack([p.grid_thw for p in pieces])
    kinds = (ids == cfg.image_token_id).int() + 2 * (ids == cfg.video_token_id).int()
    whole = bf16._rope_index(ids, kinds, None, grids, torch.tensor([p.second_per_grid for p in pieces]))
    assert torch.equal(torch.cat([s.local_pos + start for s, start in place(enc.spans)], dim=-1), whole[:, 0])
    assert int(grids[0, 0]) == 2  # 4 frames, temporal patch 2


def test_a_still_clip_is_the_image_it_repeats(bf16):
    """Two identical frames form one temporal patch whose pixels are the image processor's for that frame
    (images are tiled over time the same way): the video layout matches the processors' channel/time order."""
    if not bf16.takes_video:
        pytest.skip(f"{bf16.name} has no video input")
    frame = clip(3, n=1).frames[0]
    video, _ = bf16._video_pixels(type(clip(3))((frame, frame), (0.0, 0.5)))
    h, w = bf16._frame_size(2, frame.height, frame.width)
    image = bf16.image_processor(images=[frame.resize((w, h), 3)], do_resize=False, return_tensors="pt")
    torch.testing.assert_close(video["pixel_values_videos"], image["pixel_values"], rtol=0, atol=0)
    assert video["video_grid_thw"].tolist() == image["image_grid_thw"].tolist()


# ----- the chat template ------------------------------------------------------------------------------
# Per model: the processor class whose expansion rule (replace_image_token) is the reference, the text the
# checkpoint's template renders for one image, the placeholder token the processor expands in it, and the
# image processor arguments the processor passes.
CHAT = {
    "qwen2_5_vl_7b": ("Qwen2_5_VLProcessor", "<|vision_start|><|image_pad|><|vision_end|>", "<|image_pad|>", {}),
    "qwen3_vl_8b": ("Qwen3VLProcessor", "<|vision_start|><|image_pad|><|vision_end|>", "<|image_pad|>", {}),
    "qwen3_omni_30b_a3b": ("Qwen3OmniMoeProcessor", "<|vision_start|><|image_pad|><|vision_end|>", "<|image_pad|>", {}),
    "qwen2_5_omni_7b": ("Qwen2_5OmniProcessor", "<|vision_bos|><|IMAGE|><|vision_eos|>", "<|IMAGE|>", {}),
    "llava_1_5_7b": ("LlavaProcessor", "<image>", "<image>", {}),
    "deepseek_vl_7b": ("DeepseekVLHybridProcessor", "<image_placeholder>", "<image_placeholder>", {}),
    "internvl3_8b": ("InternVLProcessor", "<IMG_CONTEXT>", "<IMG_CONTEXT>", {"crop_to_patches": True}),
    "smolvlm2": ("SmolVLMProcessor", "<image>", "<image>", {"return_row_col_info": True}),
}


def _expansion(adapter, image) -> str:
    """The family processor's own expansion of one image placeholder: its replace_image_token, run on the
    checkpoint's image processor and processor config without building the processor (whose video half
    needs torchvision)."""
    cls, _, placeholder, kwargs = CHAT[adapter.name]
    path = Path(adapter.checkpoint) / "processor_config.json"
    proc = json.loads(path.read_text()) if path.is_file() else {}
    ns = SimpleNamespace(
        image_processor=adapter.image_processor, image_token=placeholder, patch_size=proc.get("patch_size"),
        num_additional_image_tokens=proc.get("num_additional_image_tokens", 0),
        vision_feature_select_strategy=proc.get("vision_feature_select_strategy"),
        num_image_tokens=proc.get("num_image_tokens"), image_seq_length=proc.get("image_seq_length"),
        image_seq_len=proc.get("image_seq_len"), start_image_token="<img>", end_image_token="</img>",
        fake_image_token="<fake_token_around_image>", global_image_token="<global-img>",
    )
    images = [[image]] if adapter.name == "smolvlm2" else [image]
    inputs = adapter.image_processor(images=images, return_tensors="np", **kwargs)
    assert adapter.tokenizer.convert_tokens_to_ids(placeholder) != adapter.tokenizer.unk_token_id
    return getattr(tf, cls).replace_image_token(ns, inputs, 0)


def test_chat_ids_equal_the_template_and_the_processor(bf16):
    """A single-turn text + image + text prompt: the harness's ids (chat header in the prefix, image in B, text
    and footer in the query) equal the checkpoint's own ``apply_chat_template`` text with the image placeholder
    expanded by the family processor's rule, tokenized as the processor tokenizes it (BOS included where the
    tokenizer adds one)."""
    if bf16.image_processor is None:
        pytest.skip(f"{bf16.name} is served text-only here (its own test file checks its chat framing)")
    if bf16.name == "gemma3n_e4b":
        pytest.skip("Gemma3nProcessor's image expansion is checked in tests/models/test_gemma3n.py")
    image = picture(5, (448, 112) if bf16.name == "smolvlm2" else (112, 112))
    message = [{"role": "user", "content": [{"type": "text", "text": "Look."}, {"type": "image"},
                                             {"type": "text", "text": "What is shown?"}]}]
    tok = bf16.tokenizer
    rendered = tok.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
    _, image_text, placeholder, _ = CHAT[bf16.name]
    assert rendered.count(image_text) == 1, rendered
    before, after = rendered.split(image_text)
    header, footer = bf16.chat
    if tok.bos_token and header.startswith(tok.bos_token) and not before.startswith(tok.bos_token):
        before = tok.bos_token + before  # the tokenizer adds it when the processor encodes the prompt
    assert before.startswith(header) and after.endswith(footer)
    pre, post = before[len(header):], after[: len(after) - len(footer)]
    spans = [*([Span("A", (pre,))] if pre else []), Span("B", (image,)), Span("query", (post,))]
    ours = torch.cat([s.input_ids for s in bf16.encode(spans).spans]).tolist()
    assert ours == tok(rendered.replace(placeholder, _expansion(bf16, image)))["input_ids"]
