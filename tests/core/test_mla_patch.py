"""The MLA patch on the tiny MLA families: c_KV at rank m, k_pe at its own rank, bytes per channel,
full = re-prefill."""

from __future__ import annotations

import pytest
from tinyfamilies import standard_spans

from kamera.arms import make_arm
from kamera.metrics import kl
from kamera.reuse.context import ReuseContext

MLA_FAMILIES = ["tiny_kimi", "tiny_deepseek_v2"]


@pytest.fixture(scope="module")
def contexts(tiny):
    return {name: ReuseContext(tiny(name), standard_spans(tiny(name))) for name in [*MLA_FAMILIES, "tiny_qwen2_5_vl"]}


@pytest.mark.parametrize("name", MLA_FAMILIES)
def test_full_rank_on_both_channels_is_re_prefill(contexts, name):
    ctx = contexts[name]
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    out = make_arm("patch", rank=None).run(ctx)  # rotary_rank "auto": full stays full on k_pe too
    c_kv, k_pe = (s.width for s in ctx.adapter.specs)
    assert out.params["effective_rank"] == min(ctx.n_b, c_kv)
    assert out.params["effective_rotary_rank"] == min(ctx.n_b, k_pe)
    assert kl(ctx.reprefill_logits, out.out.logits) <= 1e-6 * kl_blind
    assert out.params["patch_dtype"] == "float32"


@pytest.mark.parametrize("name", MLA_FAMILIES)
def test_k_pe_band_gets_a_quarter_of_the_rank_and_bytes_are_counted_per_channel(contexts, name):
    ctx = contexts[name]
    n, layers = ctx.n_b, ctx.adapter.n_layers
    c_kv, k_pe = (s.width for s in ctx.adapter.specs)
    out = make_arm("patch", rank=16).run(ctx)
    assert (out.params["effective_rank"], out.params["effective_rotary_rank"]) == (16, 4)
    by_channel = {"c_kv": layers * 16 * (n + c_kv) * 4, "k_pe": layers * 4 * (n + k_pe) * 4}
    assert out.params["bytes_by_channel"] == by_channel and out.bytes == sum(by_channel.values())
    hand = make_arm("patch", rank=16, rotary_rank=None)  # k_pe at full rank, set by hand
    assert hand.params()["rotary_rank"] is None  # the knob a row records
    assert hand.run(ctx).params["effective_rotary_rank"] == min(n, k_pe)
    orbit = make_arm("orbit", rank=16, hold_out=False, orderings=[[0, 1]]).run(ctx)  # the item's own ordering
    assert orbit.bytes == out.bytes and orbit.params["effective_rotary_rank"] == 4
    with pytest.raises(ValueError, match="rotary_rank"):
        make_arm("patch", rank=16, rotary_rank="quarter")


def test_gqa_patches_k_and_v_at_the_same_rank(contexts):
    ctx = contexts["tiny_qwen2_5_vl"]
    out = make_arm("patch", rank=16).run(ctx)
    assert out.params["effective_rank"] == out.params["effective_rotary_rank"] == 16
    k, v = out.params["bytes_by_channel"].values()
    assert k == v
