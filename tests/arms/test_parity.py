"""Parity of the token baselines with their authors' code: the same tensors to the authors' selection rule and to
our arm, the same tokens (and layers) chosen (issue 30 item 7; docs/baselines.md, column "conformance").

None of the authors' code installs on a CPU machine (LMCache's wheel needs vLLM and CUDA ops, the others are vLLM /
nano-vllm forks), so each rule is restated here line by line from the file and commit cited beside it. The
restatements are the selection only (which rows, how many); the recompute that follows is our engine's
(``kamera.reuse.recompute``), checked in ``test_recompute_engine.py``.

The feed: the standard item ``[prefix · A_1 · A_2 · B · query]`` of a tiny family. Prefix and A carry the full
prefill's KV here (only B is reused), so at the check layer their fresh and cached KV agree (deviation 0), and the
query is computed by every arm (given deviation 0 too): where an authors' rule counts or ranks over more than B,
the rows it picks outside B change nothing, and parity is over B. What a rule counts is restated too: LMCache's
blend is handed the cached tokens only (:func:`lmcache_blended`), so a long query (:func:`long_query_ctx`) tells a
count over the cached range from one over the whole prompt.
"""

from __future__ import annotations

import math

import pytest
import torch
from arms_support import b_kv, changed_rows, shared_ctx
from tinyfamilies import standard_spans

from kamera.arms import make_arm
from kamera.items.spans import Span
from kamera.job.spec import build_specs
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import PartialForward


# ----- the authors' rules, restated line by line ---------------------------------------------------------------
def lmcache_blended(n_prompt: int, n_cached: int) -> range:
    """LMCache 0.5.6, lmcache/integration/vllm/vllm_v1_adapter.py ``start_load_kv`` (enable_blending): the blender
    gets ``tokens[:lmcache_cached_tokens]``, the rows LMCache holds; the rest of the prompt (the query) is vLLM's to
    compute and never enters the blend's ratio."""
    return range(min(n_cached, n_prompt))


def lmcache_select(k: torch.Tensor, old_k: torch.Tensor, ratio: float) -> torch.Tensor:
    """LMCache 0.5.6 (PyPI wheel lmcache-0.5.6-cp311-…manylinux_2_28_x86_64.whl, sha256 14530ff7…9194),
    lmcache/v1/compute/blend/blender.py ``LMCBlender.process_qkv`` at a check layer: ``k`` / ``old_k`` are the
    post-RoPE keys [tokens, heads · dim] of the blended rows (:func:`lmcache_blended`)."""
    diff_k = torch.sum((k.to(torch.float32) - old_k.to(torch.float32)) ** 2, dim=[1])
    total_len = diff_k.shape[0]
    topk_num = int(total_len * ratio)
    topk_num = max(topk_num, 1)
    top_indices = torch.topk(diff_k, k=topk_num).indices
    top_indices, _ = torch.sort(top_indices)
    return top_indices


def cacheblend_original_select(value: torch.Tensor, value_old: torch.Tensor, ratio: float,
                               last_len: int) -> torch.Tensor:
    """``YaoJiayi/CacheBlend`` at 55ad026, vllm_blend/vllm/attention/backends/xformers.py (status 1, the check
    layer): ``value`` / ``value_old`` are [tokens, kv_heads, head_dim] of the whole prompt, the last ``last_len``
    the suffix (query); returns the selected non-suffix rows (the code then appends the suffix rows)."""
    total_len = value.shape[0]
    topk_num = int((total_len - last_len) * ratio)
    temp_diff = torch.sum((value[:-last_len, :, :] - value_old[:-last_len, :, :]) ** 2, dim=[1, 2])
    top_indices = torch.topk(temp_diff, k=topk_num).indices
    top_indices, _ = torch.sort(top_indices)
    return top_indices


def epic_recompute_set(chunk_lengths: list[int], recomp_num: int) -> list[int]:
    """``DerekHJH/epic`` at 3204410, benchmarks_ours/evals/e2e/main.py, the ``kvlink-<k>`` branch: chunks are the
    system prompt, the documents and the question; the first k tokens of every chunk after the first, the
    question whole."""
    start_offset = [0]
    for n in chunk_lengths:
        start_offset.append(start_offset[-1] + n)
    temp = []
    for i in range(1, len(start_offset) - 1):
        if i == len(start_offset) - 2:
            temp += list(range(start_offset[i], start_offset[i + 1]))
        else:
            temp += list(range(start_offset[i], start_offset[i] + recomp_num))
    return temp


def vlcache_recompute_set(token_ids: list[int], image_token_id: int, recompute_ratio: float) -> list[int]:
    """``Odysseusq/VLCache`` at 59b871d: nanovllm/engine/sequence.py ``find_image_token_range`` (first to last
    image token, one image), block_manager.py ``try_partial_recompute`` (R = ceil(ratio · N)) and
    model_runner.py's two sub-sequences (text before the image + its first R tokens; the text after it)."""
    start = end = -1
    for i, tid in enumerate(token_ids):
        if tid == image_token_id:
            if start == -1:
                start = i
            end = i + 1
    img_start, img_end = start, end
    n = img_end - img_start
    r = math.ceil(recompute_ratio * n)
    return list(range(0, img_start + r)) + list(range(img_end, len(token_ids)))


# ----- the same tensors, from one item ------------------------------------------------------------------------
def check_layer_rows(ctx: ReuseContext, channel: int, layer: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(fresh, cached) of ``channel`` at ``layer`` for every prompt row [tokens, heads, dim]: B's rows run in context
    through ``layer`` (as both codebases run every row up to the check layer), against B's relocated cache; the
    other rows' fresh and cached rows are equal (prefix and A: the full prefill's; the query: zeros)."""
    pf = PartialForward(ctx)
    rows = torch.arange(ctx.n_b)
    hidden = pf.entry_hidden(0, rows)
    for l in range(layer + 1):
        hidden = pf.step(l, rows, hidden)
    fresh_b = pf.current(layer, rows)[channel].float()
    old_b = ctx.relocated.layers[layer][channel].float()
    before = torch.cat([ctx.full_kv(i).layers[layer][channel].float() for i in range(ctx.b)])
    query = torch.zeros(ctx.enc.spans[ctx.q].n_tokens, *old_b.shape[1:])
    return torch.cat([before, fresh_b, query]), torch.cat([before, old_b, query])


def lmcache_picks(ctx: ReuseContext, channel: int, ratio: float = 0.15) -> list[int]:
    """The B rows LMCache's blend recomputes on this item: its rule over the cached rows [prefix · A · B]."""
    k, old_k = check_layer_rows(ctx, channel)
    cached = lmcache_blended(len(k), ctx.ranges[ctx.b][1])
    return in_b(ctx, lmcache_select(k[cached].flatten(1), old_k[cached].flatten(1), ratio))


def in_b(ctx: ReuseContext, picks) -> list[int]:
    """The B-local rows among prompt rows ``picks``."""
    b0, b1 = ctx.ranges[ctx.b]
    return sorted(int(p) - b0 for p in picks if b0 <= int(p) < b1)


def chosen(ctx: ReuseContext, arm: str, **knobs) -> tuple[list[int], dict]:
    """The B rows the arm recomputed (those whose KV differs from blind reuse) and its row params."""
    out = make_arm(arm, **knobs).run(ctx)
    return changed_rows(ctx, b_kv(ctx, out.out)), out.params


def channel_of(ctx: ReuseContext, rotary: bool) -> int:
    return next(i for i, s in enumerate(ctx.adapter.specs) if (s.rotary is not None) == rotary)


def jaccard(a: list[int], b: list[int]) -> float:
    return len(set(a) & set(b)) / max(1, len(set(a) | set(b)))


# ----- CacheBlend ----------------------------------------------------------------------------------------------
def long_query_ctx(tiny, name: str) -> ReuseContext:
    """The standard item with a query of ~200 more tokens: counting the query in the ratio (0.15 · prompt) then asks
    for more rows of B than LMCache's 0.15 of the cached range, so a wrong count is visible before clamping."""
    adapter = tiny(name)
    spans = standard_spans(adapter)
    question = " ".join(f"Consider clue {i}, then weigh it." for i in range(8))
    return ReuseContext(adapter, [*spans[:-1], Span("query", (question, *spans[-1].parts))])


def cacheblend_lmcache(ctx: ReuseContext) -> tuple[list[int], dict]:
    out = build_specs("arm", ["cacheblend_lmcache"])[0].plugin.run(ctx)
    return changed_rows(ctx, b_kv(ctx, out.out)), out.params


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_deepseek_vl"])
@pytest.mark.parametrize("query", ["standard", "long"])
def test_cacheblend_lmcache_setting_picks_lmcaches_tokens(tiny, name, query):
    """``conf/arm/cacheblend_lmcache.yaml``: ‖ΔK‖² after RoPE at layer 1, max(1, int(0.15 · n)) of the n cached
    tokens [prefix · A · B] (the query is vLLM's, outside the ratio): the rows LMCache picks in B are the rows the
    arm recomputes, at every layer after the check layer; with a long query the whole-prompt count is refuted."""
    ctx = shared_ctx(tiny, name) if query == "standard" else long_query_ctx(tiny, name)
    want = lmcache_picks(ctx, channel_of(ctx, rotary=True))
    got, params = cacheblend_lmcache(ctx)
    assert want and got == want
    assert params["n_recomputed"] == min(max(1, int(0.15 * ctx.ranges[ctx.b][1])), ctx.n_b) == len(want)
    if query == "long":  # the whole prompt's 15 % is more rows: the count that included the query is caught here
        assert int(0.15 * ctx.ranges[-1][1]) > params["n_recomputed"] < ctx.n_b
        whole_prompt, _ = chosen(ctx, "cacheblend", ratio=0.15, deviation="key", count="prompt", at_least_one=True)
        assert len(whole_prompt) > len(want)


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi"])
def test_cacheblend_original_setting_picks_the_original_repositorys_tokens(tiny, name):
    """``conf/arm/cacheblend_original.yaml``: ‖ΔV‖² at layer 1, int(0.16 · n) of the prompt without its query
    (on MLA the latent c_KV, the content the values are expanded from: our reading, the original is Llama-only)."""
    ctx = shared_ctx(tiny, name)
    v, old_v = check_layer_rows(ctx, channel_of(ctx, rotary=False))
    want = in_b(ctx, cacheblend_original_select(v, old_v, 0.16, last_len=ctx.enc.spans[ctx.q].n_tokens))
    got, _ = chosen(ctx, "cacheblend", ratio=0.16, deviation="value", count="context")
    assert want and got == want


def test_cacheblend_on_mla_scores_k_pe_where_lmcache_has_no_mla_model(tiny):
    """LMCache 0.5.6 blends Llama / Qwen2 / Qwen3 only (compute/models/utils.py ``infer_model_from_vllm``); on MLA our
    ``deviation="key"`` is LMCache's rule fed the rotary key band k_pe (the same tokens), not the whole cached row
    [c_KV ‖ k_pe] (a different tensor, so possibly other tokens): the choice of tensor is ours, the rule is theirs."""
    ctx = shared_ctx(tiny, "tiny_kimi")
    k_pe, old = check_layer_rows(ctx, channel_of(ctx, rotary=True))
    want = lmcache_picks(ctx, channel_of(ctx, rotary=True))
    got, _ = cacheblend_lmcache(ctx)
    assert got == want
    c_kv, old_c = check_layer_rows(ctx, channel_of(ctx, rotary=False))
    cached = lmcache_blended(len(k_pe), ctx.ranges[ctx.b][1])
    whole = in_b(ctx, lmcache_select(torch.cat([c_kv[cached].flatten(1), k_pe[cached].flatten(1)], 1),
                                     torch.cat([old_c[cached].flatten(1), old[cached].flatten(1)], 1), 0.15))
    assert len(whole) == len(want)  # same budget; which tokens is the tensor's (Jaccard printed by -s)
    print(f"tiny_kimi: k_pe vs whole-row picks, Jaccard {jaccard(whole, want):.2f}")


def test_cacheblend_default_deliberately_differs_from_both_codebases(tiny):
    """Our default (‖ΔV‖², int(0.15 · n_B) of B, no minimum, so budget 0 is blind reuse) is the original's deviation
    at LMCache's ratio over B alone: fewer rows than either codebase's prompt-wide count, chosen by another tensor
    than LMCache's. The test shows the difference (counts and overlap), which docs/baselines.md states."""
    ctx = shared_ctx(tiny, "tiny_qwen2_5_vl")
    lmcache = lmcache_picks(ctx, channel_of(ctx, rotary=True))
    ours, params = chosen(ctx, "cacheblend")
    assert params["n_recomputed"] == int(0.15 * ctx.n_b) < len(lmcache)
    assert jaccard(ours, lmcache) < 1
    zero, _ = chosen(ctx, "cacheblend", ratio=0.0)
    assert zero == [] and chosen(ctx, "cacheblend", ratio=0.0, count="context", at_least_one=True)[0]


# ----- EPIC ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi"])
def test_epic_picks_the_first_k_of_the_reused_chunk_as_legolink_does(tiny, name):
    """EPIC's ``kvlink-16`` set over [prefix · A_1 · A_2 · B · query] restricted to B is the arm's first 16 rows of
    B. Deliberate difference (stated, not run): each EPIC chunk is prefilled from position 0 with its own BOS, so
    its first k include that BOS; our B starts with its content (the canonical is prefilled behind the prefix)."""
    ctx = shared_ctx(tiny, name)
    lengths = [s.n_tokens for s in ctx.enc.spans]
    want = in_b(ctx, epic_recompute_set(lengths, 16))
    got, _ = chosen(ctx, "epic")
    assert want == list(range(min(16, ctx.n_b))) and got == want


# ----- VLCache -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_llava"])
def test_vlcache_picks_the_first_r_image_tokens_and_the_text_as_the_proof_of_concept(tiny, name):
    """The proof of concept's recompute set for one image (B and the query as its prompt) restricted to B: B's
    text and the first ceil(0.1 · N) image tokens, the arm's rows (ratio 0.10, text=True)."""
    ctx = shared_ctx(tiny, name)
    b = ctx.enc.spans[ctx.b]
    ids = torch.cat([b.input_ids, ctx.enc.spans[ctx.q].input_ids]).tolist()
    image_ids = set(b.input_ids[b.visual].tolist())
    assert len(image_ids) == 1 and not set(b.input_ids[~b.visual].tolist()) & image_ids  # one image token id
    want = [r for r in vlcache_recompute_set(ids, image_ids.pop(), 0.10) if r < b.n_tokens]
    got, params = chosen(ctx, "vlcache")
    assert params["n_images"] == 1 and got == want


# ----- the rules fail on a mutated rule ------------------------------------------------------------------------
def test_a_mutated_rule_is_caught(tiny):
    """The comparisons above can fail: the arm with the other deviation, or LMCache's rule with bottom-k, picks
    other rows on the same item."""
    ctx = shared_ctx(tiny, "tiny_qwen2_5_vl")
    k, old_k = check_layer_rows(ctx, channel_of(ctx, rotary=True))
    want = lmcache_picks(ctx, channel_of(ctx, rotary=True))
    other, _ = chosen(ctx, "cacheblend", ratio=0.15, deviation="value", count="context", at_least_one=True)
    assert other != want
    diff = ((k - old_k) ** 2).flatten(1).sum(1)
    b0, b1 = ctx.ranges[ctx.b]
    bottom = torch.topk(diff[b0:b1], k=len(want), largest=False).indices.sort().values.tolist()  # the rule inverted
    assert bottom != want
