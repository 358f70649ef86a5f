"""The patch arm's ``patch_dtype`` knob: float32 factors added in float32 and rounded to the cache's dtype once."""

from __future__ import annotations

import pytest
import torch
from tinyfamilies import standard_spans

from kamera.arms import make_arm
from kamera.core import ChunkKV
from kamera.job.spec import build_specs
from kamera.metrics import kl
from kamera.reuse.context import ReuseContext

SEEDS = (0, 1, 2)


def mismatched(a: ChunkKV, b: ChunkKV) -> float:
    """The fraction of KV elements where ``a`` and ``b`` differ at all."""
    pairs = [(x, y) for la, lb in zip(a.layers, b.layers, strict=True) for x, y in zip(la, lb, strict=True)]
    return sum(int((x != y).sum()) for x, y in pairs) / sum(x.numel() for x, _ in pairs)


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi"])
def test_float32_factors_bring_a_bf16_full_rank_patch_to_re_prefill(tiny, name):
    """On a bf16 model the full-rank patch with bf16 factors misses KV(B|A) by bf16 rounding of Δ's factors; with
    float32 factors the sum is rounded once and lands on KV(B|A) but for the rare element on a rounding tie, so
    its KL to re-prefill is never above the bf16 patch's, on every item; the factors cost twice the bytes."""
    adapter = tiny(name, "bfloat16")
    bf16, fp32 = make_arm("patch", rank=None), make_arm("patch", rank=None, patch_dtype="float32")
    for seed in SEEDS:
        ctx = ReuseContext(adapter, standard_spans(adapter, seed=seed))
        low, high = bf16.run(ctx), fp32.run(ctx)
        kl_low, kl_high = kl(ctx.reprefill_logits, low.out.logits), kl(ctx.reprefill_logits, high.out.logits)
        assert kl_high <= kl_low, f"seed {seed}: float32 factors {kl_high} > bf16 factors {kl_low}"
        assert kl_low > 0  # the bf16 factors' rounding is visible in the logits
        kv_low = bf16.full_patch(ctx).apply(ctx.relocated)
        kv_high = fp32.full_patch(ctx).apply(ctx.relocated)
        assert kv_high.layers[0][0].dtype == torch.bfloat16  # rounded to the cache's dtype
        assert mismatched(kv_high, ctx.conditioned) < 1e-3 < mismatched(kv_low, ctx.conditioned)
        assert (low.params["patch_dtype"], high.params["patch_dtype"]) == ("bfloat16", "float32")
        assert high.bytes == 2 * low.bytes
        assert high.params["bytes_by_channel"] == {c: 2 * b for c, b in low.params["bytes_by_channel"].items()}


def test_float32_models_are_unchanged_and_the_default_keeps_the_knobs_key(tiny):
    """On a float32 model the knob is the default's patch (the same shared SVD): bit-identical logits, bytes and
    params; at its default the knob is not in the arm's knobs, so existing jobs keep their records."""
    adapter = tiny("tiny_qwen2_5_vl")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    for rank in (4, None):
        plain, fp32 = (
            make_arm("patch", rank=rank).run(ctx),
            make_arm("patch", rank=rank, patch_dtype="float32").run(ctx),
        )
        assert torch.equal(plain.out.logits, fp32.out.logits)
        assert (plain.bytes, plain.params["bytes_by_channel"]) == (fp32.bytes, fp32.params["bytes_by_channel"])
        assert plain.params == fp32.params and plain.params["patch_dtype"] == "float32"
    default, knob = build_specs("arm", ["patch_r16", {"patch_r16": {"patch_dtype": "float32"}}])
    assert "patch_dtype" not in default.knobs and default.key == build_specs("arm", ["patch_r16"])[0].key
    assert knob.knobs["patch_dtype"] == "float32" and knob.label == "patch_r16[patch_dtype=float32]"


def test_bad_patch_dtype_is_one_line():
    for bad in ("bfloat16x", "fp64", 32):
        with pytest.raises(ValueError, match="patch_dtype must be null"):
            make_arm("patch", rank=4, patch_dtype=bad)
