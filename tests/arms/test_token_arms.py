"""Token-recompute arms: budget 0 is blind reuse bit for bit, a full budget is re-prefill, bytes add up,
and each selector picks the rows its docstring says, on every tiny family."""

from __future__ import annotations

import math

import pytest
import torch
from arms_support import b_kv, changed_rows, rel_err, shared_ctx
from tinyfamilies import TINY

from kamera.arms import make_arm
from kamera.arms.budget import tokens_for
from kamera.arms.oracle_topp import deficit_scores
from kamera.arms.tokens import top_rows, visual_runs
from kamera.items.spans import Span
from kamera.metrics import kl
from kamera.reuse.context import ReuseContext

BIG = 10_000
# arm → (knobs at budget 0, knobs at a full budget)
BUDGETS = {
    "first_k": ({"k": 0}, {"k": BIG}),
    "epic": ({"k": 0}, {"k": BIG}),
    "sink": ({"k": 0}, {"k": BIG}),
    "mpic": ({"k": 0, "text": False}, {"k": BIG}),
    "vlcache": ({"ratio": 0.0, "text": False}, {"ratio": 1.0}),
    "oracle_topp": ({"p": 0.0}, {"p": 1.0}),
    "cross_mass": ({"fraction": 0.0}, {"fraction": 1.0}),
    "nystrom": ({"k": 0}, {"k": BIG}),
    "quest": ({"budget": 0}, {"budget": BIG}),
    "cacheblend": ({"ratio": 0.0}, {"ratio": 1.0}),
    "cacheblend_gradual": ({"ratio": 0.0, "filtering": "gradual"}, {"ratio": 1.0, "filtering": "gradual"}),
}
IMAGE_ARMS = {"mpic", "vlcache"}


def arm_for(key: str, knobs: dict):
    return make_arm(key.removesuffix("_gradual"), **knobs)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("key", sorted(BUDGETS))
def test_budget_zero_is_blind_and_full_budget_is_reprefill(tiny, name, key):
    ctx = shared_ctx(tiny, name)
    zero, full = (arm_for(key, k) for k in BUDGETS[key])
    reason = zero.refuses(ctx.adapter)
    if key in IMAGE_ARMS and name in ("tiny_deepseek_v2", "tiny_gemma3"):  # text-only twins
        assert reason and "text-only" in reason
        return
    assert reason is None
    out0 = zero.run(ctx)
    assert torch.equal(out0.out.logits, ctx.blind.logits)
    assert out0.bytes == 0 and out0.params["n_recomputed"] == 0
    out1 = full.run(ctx)
    assert rel_err(b_kv(ctx, out1.out), ctx.conditioned) <= 1e-5
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl(ctx.reprefill_logits, out1.out.logits) <= 1e-6 * kl_blind
    assert out1.bytes == ctx.page_bytes()
    assert out1.params["n_recomputed"] == ctx.n_b and out1.params["recompute_fraction"] == 1.0


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize(
    "arm_name",
    ["first_k", "epic", "sink", "mpic", "vlcache", "oracle_topp", "cross_mass", "nystrom", "quest",
     "cacheblend"],
)
def test_default_knobs_bytes_and_row_columns(tiny, name, arm_name):
    ctx = shared_ctx(tiny, name)
    arm = make_arm(arm_name)
    if arm.refuses(ctx.adapter):
        return
    out = arm.run(ctx)
    n = out.params["n_recomputed"]
    changed = changed_rows(ctx, b_kv(ctx, out.out))
    assert len(changed) == n
    assert out.bytes == n * ctx.page_bytes() // ctx.n_b
    assert out.params["recompute_fraction"] == pytest.approx(n / ctx.n_b)
    for knob, value in arm.params().items():
        assert out.params[knob] == value
    assert torch.isfinite(out.out.logits).all()


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_deepseek_v2"])
def test_leading_token_arms_pick_the_first_k(tiny, name):
    ctx = shared_ctx(tiny, name)
    for arm_name, k in (("first_k", 8), ("epic", 16), ("sink", 32)):
        out = make_arm(arm_name).run(ctx)
        assert changed_rows(ctx, b_kv(ctx, out.out)) == list(range(min(k, ctx.n_b))), arm_name


@pytest.mark.parametrize("name", ["tiny_qwen3_vl", "tiny_kimi", "tiny_llava"])
def test_image_arms_pick_leading_image_tokens_and_text(tiny, name):
    ctx = shared_ctx(tiny, name)
    runs = visual_runs(ctx)
    assert runs
    visual = ctx.enc.spans[ctx.b].visual.cpu()
    text = torch.nonzero(~visual).flatten().tolist()
    arms = ((make_arm("mpic", k=5), lambda n: 5), (make_arm("vlcache"), lambda n: math.ceil(0.1 * n)))
    for arm, per_image in arms:
        lead = [i for a, z in runs for i in range(a, a + min(per_image(z - a), z - a))]
        out = arm.run(ctx)
        assert changed_rows(ctx, b_kv(ctx, out.out)) == sorted(set(lead) | set(text))
        out = make_arm(arm.name, **{**arm.params(), "text": False}).run(ctx)
        assert changed_rows(ctx, b_kv(ctx, out.out)) == lead


def test_oracle_topp_takes_the_largest_deficit_rows(tiny):
    ctx = shared_ctx(tiny, "tiny_qwen2_5_vl")
    out = make_arm("oracle_topp", p=0.25).run(ctx)
    k = math.ceil(0.25 * ctx.n_b)
    assert changed_rows(ctx, b_kv(ctx, out.out)) == top_rows(deficit_scores(ctx), k).tolist()
    assert 0.25 < out.params["delta_energy_covered"] <= 1.0


def test_quest_recomputes_exactly_its_budget_and_matches_bytes(tiny):
    ctx = shared_ctx(tiny, "tiny_llava")
    for budget in (1, 7, 16, 17, 40):
        out = make_arm("quest", budget=budget).run(ctx)
        assert out.params["n_recomputed"] == budget
        assert out.params["n_pages"] == math.ceil(budget / 16)
    out = make_arm("quest", match_rank=1).run(ctx)
    assert out.params["n_recomputed"] == out.params["budget_tokens"] == tokens_for(ctx, 1)
    assert out.bytes <= ctx.patch.truncate(1).nbytes()
    assert ctx.adapter.lm.config._attn_implementation == "sdpa"  # the eager probe is undone


def test_first_k_match_rank_overrides_k(tiny):
    ctx = shared_ctx(tiny, "tiny_qwen3_vl")
    out = make_arm("first_k", k=3, match_rank=2).run(ctx)
    assert out.params["n_recomputed"] == tokens_for(ctx, 2) != 3
    assert out.recomputed_tokens >= out.params["n_recomputed"] * ctx.adapter.n_layers  # every layer, plus lead-ins


def test_cross_mass_refuses_an_item_without_a(tiny):
    adapter = tiny("tiny_deepseek_v2")
    spans = [Span("prefix", ("Answer.",)), Span("B", ("the ball is red.",)), Span("query", ("Colour?",))]
    with pytest.raises(ValueError, match="no A span"):
        make_arm("cross_mass").run(ReuseContext(adapter, spans))


def test_image_arms_refuse_text_only_items(tiny):
    adapter = tiny("tiny_qwen2_5_vl")
    spans = [
        Span("prefix", ("Answer.",)), Span("A", ("a cat.",)), Span("B", ("a ball.",)),
        Span("query", ("?",)),
    ]
    with pytest.raises(ValueError, match="no image tokens"):
        make_arm("mpic").run(ReuseContext(adapter, spans))


@pytest.mark.parametrize(
    ("arm_name", "knobs", "match"),
    [
        ("first_k", {"k": -1}, "non-negative int"),
        ("first_k", {"k": 2.5}, "non-negative int"),
        ("quest", {"page_size": 0}, "page_size"),
        ("vlcache", {"ratio": 1.5}, r"in \[0, 1\]"),
        ("oracle_topp", {"p": True}, r"in \[0, 1\]"),
        ("mpic", {"text": "yes"}, "bool"),
        ("cacheblend", {"filtering": "layerwise"}, "filtering"),
        ("cacheblend", {"deviation": "q"}, "deviation"),
        ("cacheblend", {"checks": 0}, "checks"),
        ("nystrom", {"k": None}, "non-negative int"),
        ("quest", {"match_rank": -2}, "match_rank"),
    ],
)
def test_bad_knobs_are_refused(arm_name, knobs, match):
    with pytest.raises(ValueError, match=match):
        make_arm(arm_name, **knobs)
