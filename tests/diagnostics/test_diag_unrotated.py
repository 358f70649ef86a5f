"""The ``unrotated`` arm (Fig. 12a): blind reuse without R(δ), so it differs from blind exactly by the
missing rotation of the rotary channels, and equals blind bit for bit when δ = 0."""

from __future__ import annotations

import pytest
import torch
from diag_support import context
from tinyfamilies import TINY

from kamera.arms import make_arm
from kamera.arms.unrotated import unrotated_kv
from kamera.core import rotate
from kamera.job import build_specs
from kamera.metrics import kl


@pytest.mark.parametrize("name", TINY)
def test_unrotated_is_blind_without_the_rotation(tiny, name):
    ctx = context(tiny, name)
    assert ctx.delta != 0
    kv = unrotated_kv(ctx)
    assert torch.equal(kv.positions, ctx.native_positions(ctx.b))
    for l, (mine, blind, canon) in enumerate(zip(kv.layers, ctx.relocated.layers, ctx.canonical.layers, strict=True)):
        for t, b, c, spec in zip(mine, blind, canon, ctx.adapter.specs, strict=True):
            assert t is c  # the canonical as prefilled, no copy
            if spec.rotary is None:
                assert torch.equal(t, b)
            else:  # R(δ), by the layer's own RoPE base (Gemma 3: one per layer type), is all that separates it
                assert torch.equal(rotate(t, ctx.delta, spec.rotary_at(l)), b) and not torch.equal(t, b)
    out = make_arm("unrotated").run(ctx)
    assert out.bytes == 0 and out.params == {}
    assert kl(ctx.reprefill_logits, out.out.logits) > 0 and not torch.equal(out.out.logits, ctx.blind.logits)


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi", "tiny_llava"])
def test_unrotated_equals_blind_when_delta_is_zero(tiny, name):
    ctx = context(tiny, name, canonical_context="native")
    assert ctx.delta == 0
    assert torch.equal(make_arm("unrotated").run(ctx).out.logits, ctx.blind.logits)


def test_the_arm_file_builds_the_arm():
    (spec,) = build_specs("arm", ["unrotated"])
    assert spec.label == "unrotated" and spec.plugin.name == "unrotated"
    with pytest.raises(ValueError, match="no knob"):
        make_arm("unrotated", rank=8)
