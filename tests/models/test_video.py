"""A video chunk as the Qwen families' own video input (tiny twins; the shaped tests repeat this at real
dimensions): frames grouped into temporal patches, time rows from the frames' times, and the operator's
identities on a clip as B."""

from __future__ import annotations

import pytest
import torch
from shaped_support import clip, video_item

from kamera.core import relocate
from kamera.items.spans import Clip, Span
from kamera.metrics import eta, kl
from kamera.models import place
from kamera.reuse.context import ReuseContext

QWEN_TINY = ["tiny_qwen2_5_vl", "tiny_qwen3_vl", "tiny_qwen3_vl_moe", "tiny_qwen3_omni"]


@pytest.mark.parametrize("name", QWEN_TINY)
def test_a_clip_is_one_video_with_temporal_patches(tiny, name):
    adapter = tiny(name)
    enc = adapter.encode_span(Span("B", (clip(0, n=5),)))  # 5 frames: padded to 6, three temporal patches
    cfg = adapter.model.config
    n_video = int((enc.input_ids == cfg.video_token_id).sum())
    grid = adapter._video_pixels(clip(0, n=5))[0]["video_grid_thw"][0]
    assert int(grid[0]) == 3 and n_video == int(grid.prod()) // 4
    assert not bool((enc.input_ids == cfg.image_token_id).any())
    stamps = adapter.decode(enc.input_ids.tolist())
    t = enc.local_pos[0][enc.input_ids == cfg.video_token_id].unique().tolist()
    # one block, time on the t row: patch k sits k · (2 frames / 2 fps) seconds later
    if name == "tiny_qwen2_5_vl":  # … times tokens_per_second, after <|vision_start|>
        assert t == [1, 1 + cfg.vision_config.tokens_per_second, 1 + 2 * cfg.vision_config.tokens_per_second]
    elif name == "tiny_qwen3_omni":  # … times position_id_per_seconds (absolute seconds)
        assert t == pytest.approx([1, 1 + cfg.position_id_per_seconds, 1 + 2 * cfg.position_id_per_seconds])
    else:  # Qwen3-VL: one block per temporal patch behind its mean time, as text
        assert [s for s in ("<4.2 seconds>", "<5.2 seconds>", "<6.0 seconds>") if s in stamps] == [
            "<4.2 seconds>", "<5.2 seconds>", "<6.0 seconds>"]


@pytest.mark.parametrize("name", QWEN_TINY)
def test_positions_compose_over_a_video_item(tiny, name):
    adapter = tiny(name)
    enc = adapter.encode(video_item())
    ids = torch.cat([s.input_ids for s in enc.spans])[None]
    cfg = adapter.model.config
    pieces = [adapter._video(p) for s in video_item() for p in s.parts if isinstance(p, Clip)]
    kinds = (ids == cfg.image_token_id).int() + 2 * (ids == cfg.video_token_id).int()
    whole = adapter._rope_index(ids, kinds, None, torch.stack([p.grid_thw for p in pieces]),
                                torch.tensor([p.second_per_grid for p in pieces]))
    assert torch.equal(torch.cat([s.local_pos + p for s, p in place(enc.spans)], dim=-1), whole[:, 0])


@pytest.mark.parametrize("name", QWEN_TINY)
def test_operator_identities_on_a_video_chunk(tiny, name):
    adapter = tiny(name)
    ctx = ReuseContext(adapter, video_item())
    b = ctx.enc.spans[ctx.b].span
    enc = adapter.encode_span(b)
    at0 = adapter.forward([(enc, 0)])
    at57 = adapter.forward([(enc, 57)])
    base = adapter.read(at0.cache, 0, enc.n_tokens, enc.local_pos)
    target = adapter.read(at57.cache, 0, enc.n_tokens, enc.local_pos + 57)
    k = next(i for i, s in enumerate(adapter.specs) if s.rotary is not None)
    moved = relocate(base, 57)
    assert (
        max(float((m[k] - t[k]).norm() / t[k].norm()) for m, t in zip(moved.layers, target.layers, strict=True)) <= 1e-5
    )
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-6
    assert eta(kl(ctx.reprefill_logits, ctx.query(ctx.patch.apply(ctx.relocated)).logits), kl_blind) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).hidden, ctx.blind.hidden)
    native = ReuseContext(adapter, ctx.enc, canonical_context="native")
    torch.testing.assert_close(native.blind.logits, native.oracle.logits, rtol=0, atol=1e-5)


def test_families_without_video_read_a_clips_frames_as_images(tiny):
    adapter = tiny("tiny_llava")
    c = clip(0, n=3)
    runs = adapter.runs(Span("B", ("frames:", c, "end")))
    assert runs[0] == "frames:" and runs[1:4] == list(c.frames) and runs[4] == "end"


def test_bad_clips_are_refused():
    frames = clip(0, n=2).frames
    with pytest.raises(ValueError, match="increase"):
        Clip(frames, (1.0, 1.0))
    with pytest.raises(ValueError, match="2 frames but 1 timestamps"):
        Clip(frames, (1.0,))
    with pytest.raises(ValueError, match="at least one frame"):
        Clip((), ())
    with pytest.raises(ValueError, match="differ in size"):
        Clip((frames[0], frames[1].resize((10, 10))), (0.0, 1.0))
