"""CONDUIT and PRCR (issue 30 item 8): CONDUIT's selection against its code restated line by line, PRCR's algebra.

CONDUIT: ``cpa2001/CONDUIT`` at 96c71d2, nanovllm/engine/recompute.py (MIT); the code needs CUDA and flashinfer, so
the rule is restated here (never imported), the functions named in each docstring.
"""

from __future__ import annotations

import math

import pytest
import torch
from arms_support import b_kv, changed_rows, shared_ctx
from tinyfamilies import standard_spans

from kamera.arms import make_arm
from kamera.arms.conduit import query_mass, query_mass_blind, throughput_scores
from kamera.arms.prcr import rebound_kv
from kamera.arms.tokens import visual_runs
from kamera.core import relocate
from kamera.core.chunk import same_positions
from kamera.metrics import kl
from kamera.reuse.context import ReuseContext


# ----- CONDUIT's code, restated line by line -------------------------------------------------------------------
def conduit_attention_mass(q: torch.Tensor, k: torch.Tensor, query_key_limits: torch.Tensor) -> torch.Tensor:
    """``compute_query_attention_mass`` (one chunk of queries): q [n_q, heads, d], k [n_k, kv_heads, d]."""
    num_queries, num_q_heads, head_dim = q.shape
    num_keys, num_kv_heads, _ = k.shape
    scale = 1.0 / math.sqrt(head_dim)
    if num_q_heads != num_kv_heads:
        k = k.repeat_interleave(num_q_heads // num_kv_heads, dim=1)
    q_t = q.transpose(0, 1).contiguous().to(torch.float32)
    k_t = k.transpose(0, 1).contiguous().to(torch.float32).transpose(1, 2)
    key_positions = torch.arange(num_keys, dtype=torch.int64)
    scores = torch.zeros(num_keys, dtype=torch.float32)
    logits = torch.bmm(q_t, k_t) * scale
    invalid = key_positions.unsqueeze(0) >= query_key_limits.unsqueeze(1)
    logits = logits.masked_fill(invalid.unsqueeze(0), -torch.inf)
    weights = torch.softmax(logits, dim=-1)
    scores += weights.sum(dim=1).sum(dim=0)
    return scores / max(1, num_queries * num_q_heads)


def conduit_select(
    per_layer_scores: list[torch.Tensor],
    v_per_layer: list[torch.Tensor],
    candidate_positions: list[int],
    candidate_image_ids: torch.Tensor,
    budget: int,
    strength: float,
) -> list[int]:
    """``build_kv_score_candidate_scores`` (score_use_v_norm, every layer, then ``apply_kv_score_image_score_bias``)
    and the top-k of ``select_kv_score_positions``."""
    index = torch.tensor(candidate_positions, dtype=torch.int64)
    per_layer = [s.index_select(0, index).to(torch.float32) for s in per_layer_scores]
    v_norms = [
        v.index_select(0, index).reshape(len(candidate_positions), -1).to(torch.float32).norm(dim=-1)
        for v in v_per_layer
    ]
    per_layer = [s * n for s, n in zip(per_layer, v_norms, strict=True)]
    fused = torch.stack(per_layer, dim=0).mean(dim=0)
    safe = torch.clamp(fused, min=0.0)
    num_images = int(candidate_image_ids.max().item()) + 1
    sums = torch.zeros(num_images).scatter_add_(0, candidate_image_ids, safe)
    counts = torch.zeros(num_images).scatter_add_(0, candidate_image_ids, torch.ones_like(safe))
    means = sums / counts.clamp_min(1.0)
    importance = means / means.mean().clamp_min(1e-12)
    coef = torch.lerp(torch.ones_like(means), importance, float(strength))
    scores = fused * coef.index_select(0, candidate_image_ids)
    if budget >= len(candidate_positions):
        return list(candidate_positions)
    _, top = scores.topk(min(budget, scores.numel()))
    return sorted(candidate_positions[i] for i in top.tolist())


def test_the_attention_mass_is_conduits():
    """Our mass from attention probabilities equals CONDUIT's from q and k (GQA heads, causal key limits)."""
    torch.manual_seed(0)
    q, k = torch.randn(5, 4, 8), torch.randn(12, 2, 8)
    limits = torch.arange(8, 13)
    logits = torch.einsum("qhd,khd->hqk", q, k.repeat_interleave(2, dim=1)) / math.sqrt(8)
    logits = logits.masked_fill(torch.arange(12)[None, None, :] >= limits[None, :, None], -torch.inf)
    ours = query_mass(torch.softmax(logits, dim=-1))
    torch.testing.assert_close(ours.float(), conduit_attention_mass(q, k, limits), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("strength", [0.0, 1.0])
def test_conduit_scores_pick_conduits_tokens_with_several_images(strength):
    """Throughput × c_j over three images of unequal importance: the same top-k as CONDUIT's code at both the
    code's default strength (0) and the paper's c_j (1), and the two differ here (the coefficient moves budget)."""
    torch.manual_seed(1)
    n, layers = 30, 3
    mass = [torch.rand(n).double() * torch.linspace(0.2, 3, n).double() for _ in range(layers)]
    values = [torch.randn(n, 2, 4) for _ in range(layers)]
    image = torch.tensor([0] * 10 + [1] * 12 + [2] * 8)
    ours = torch.sort(torch.topk(throughput_scores(mass, values, image, strength), 6).indices).values.tolist()
    theirs = conduit_select([m.float() for m in mass], values, list(range(n)), image, 6, strength)
    assert ours == theirs
    other = conduit_select([m.float() for m in mass], values, list(range(n)), image, 6, 1.0 - strength)
    assert other != theirs


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi"])
def test_conduit_arm_recomputes_its_selection_and_the_text(tiny, name):
    """On the standard item (one image in B): the arm's rows are CONDUIT's top ceil(0.1 · N) image tokens by the
    probe's mass and B's cached values, plus B's text; ratio 0 with text=False is blind reuse."""
    ctx = shared_ctx(tiny, name)
    out = make_arm("conduit").run(ctx)
    ((a, z),) = visual_runs(ctx)
    content = next(i for i, s in enumerate(ctx.adapter.specs) if s.rotary is None)
    b0 = ctx.ranges[ctx.b][0]
    mass = [torch.cat([torch.zeros(b0), m.float().cpu()]) for m in query_mass_blind(ctx)]  # prompt positions
    values = [torch.cat([torch.zeros(b0, *lay[content].shape[1:]), lay[content].cpu()]) for lay in ctx.relocated.layers]
    budget = math.ceil(0.1 * (z - a))
    want = [
        p - b0
        for p in conduit_select(
            mass, values, list(range(b0 + a, b0 + z)), torch.zeros(z - a, dtype=torch.long), budget, 1.0
        )
    ]
    text = torch.nonzero(~ctx.enc.spans[ctx.b].visual.cpu()).flatten().tolist()
    assert changed_rows(ctx, b_kv(ctx, out.out)) == sorted(want + text)
    assert out.params["image_recomputed"] == budget and ctx.adapter.forwards["conduit_probe"] >= 1
    blind = make_arm("conduit", ratio=0.0, text=False).run(ctx)
    assert changed_rows(ctx, b_kv(ctx, blind.out)) == []
    with pytest.raises(ValueError, match="image_bias"):
        make_arm("conduit", image_bias=2)


# ----- PRCR ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny_llava", "tiny_qwen2_5_vl", "tiny_qwen3_vl", "tiny_kimi"])
def test_prcr_rebinds_raw_keys_at_the_native_positions_and_that_is_relocation_to_rounding(tiny, name, monkeypatch):
    """PRCR serves B from its raw (pre-RoPE) keys rotated once at B's native positions, never R(δ) on the rotated
    canonical: the arm runs with the context's relocation made unreachable. Since R(p')·k_raw = R(δ)·R(p)·k_raw, its
    keys are the relocated canonical's to float32 rounding (1-D RoPE, sectioned and interleaved M-RoPE, MLA's k_pe),
    its values, positions and bytes blind reuse's exactly, and its next-token distribution blind's to rounding."""
    adapter = tiny(name)
    ctx = ReuseContext(adapter, standard_spans(adapter))
    served, moved = rebound_kv(ctx), relocate(ctx.canonical, ctx.delta)
    assert same_positions(served.positions, moved.positions)
    for c, spec in enumerate(served.specs):
        for got, want in zip(served.layers, moved.layers, strict=True):
            if spec.rotary is None:
                assert got[c] is want[c]  # content channels: the canonical's, untouched
            else:
                torch.testing.assert_close(got[c], want[c], rtol=1e-5, atol=1e-5 * float(want[c].abs().max()))

    def unreachable(self):
        raise AssertionError("prcr used R(δ) on the rotated canonical")

    monkeypatch.setattr(ReuseContext, "relocated", property(unreachable))
    prcr = make_arm("prcr").run(ctx)
    monkeypatch.undo()
    assert prcr.bytes == 0 and kl(ctx.blind.logits, prcr.out.logits) < 1e-9


def test_prcr_refuses_keys_it_cannot_rebind_in_one_line(tiny):
    """A family whose keys are not rotate-half (DeepSeek-V2's interleaved k_pe) is refused, naming the layout."""
    why = make_arm("prcr").refuses(tiny("tiny_deepseek_v2"))
    assert why is not None and "interleaved" in why and "\n" not in why
