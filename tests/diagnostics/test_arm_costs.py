"""Issue 15 item 8: every arm's row carries sensible bytes, forwards and recomputed cells.

Every conf/arm label runs through the runner's per-item function on one synthetic item of a GQA and an
MLA tiny family, and each row's costs are checked against what the arm does: re-prefill and the
4D-mask oracle recompute B's whole page; blind and unrotated store nothing; a patch stores its factors
(checked against the closed form Σ_ℓ Σ_c min(m_c, n_B, w_c)(n_B + w_c) numbers); a token arm writes
n_recomputed rows on every layer; matched budgets never exceed the patch's bytes.
"""

from __future__ import annotations

import json

import pytest

from kamera.arms.budget import channel_ranks, patch_numbers, widths
from kamera.arms.shape import evaluate_item
from kamera.job import build_specs, conf_labels, select
from kamera.reuse.context import ReuseContext
from kamera.sweep import compose_config

# one worker runs this module: its module-scoped fixtures are built once, not once per xdist worker
pytestmark = pytest.mark.xdist_group("arm-costs")

TOKEN_ARMS = {"epic", "mpic", "vlcache", "sink", "first_k", "oracle_topp", "quest", "cross_mass", "nystrom"}


@pytest.fixture(scope="module", params=["tiny_qwen2_5_vl", "tiny_kimi"])
def costs(request, tiny):
    """(rows by arm label, the item's context, refused labels) for every conf/arm label on one item."""
    labels = conf_labels("arm")
    cfg = compose_config([f"model={request.param}", "bench=synthetic", "n_items=1", f"arms=[{','.join(labels)}]"])
    adapter = tiny(request.param)
    item = select(cfg, adapter).items[0]
    rows, _, refused = evaluate_item(adapter, item, build_specs("arm", cfg.arms), [], cfg, {"model": request.param})
    return {r["arm"]: r for r in rows}, ReuseContext(adapter, item.spans()), {r["arm"] for r in refused}


def test_every_arm_reports_integer_costs(costs):
    rows, ctx, refused = costs
    assert set(rows) | refused == set(conf_labels("arm"))
    assert refused <= {"shadowkv_r16", "shadowkv_r64"} and (ctx.adapter.attention == "MLA") == bool(refused)
    page = ctx.page_bytes()
    for label, r in rows.items():
        for key in ("bytes", "forwards", "recomputed_tokens"):
            assert isinstance(r[key], int) and r[key] >= 0, (label, key, r[key])
        assert r["bytes_frac"] == pytest.approx(r["bytes"] / page), label


def test_ceiling_floor_and_diagnostic_arms(costs):
    rows, ctx, _ = costs
    cells, page = ctx.n_b * ctx.adapter.n_layers, ctx.page_bytes()
    for label in ("reprefill", "oracle4d"):  # their one forward is shared; they recompute every cell of B
        assert (rows[label]["bytes"], rows[label]["recomputed_tokens"], rows[label]["forwards"]) == (page, cells, 0)
    assert (rows["blind"]["bytes"], rows["blind"]["forwards"], rows["blind"]["recomputed_tokens"]) == (0, 0, 0)
    assert (rows["unrotated"]["bytes"], rows["unrotated"]["forwards"]) == (0, 1)  # its own query forward


def test_patch_bytes_follow_the_closed_form(costs):
    rows, ctx, _ = costs
    n_b, n_layers, item = ctx.n_b, ctx.adapter.n_layers, ctx.conditioned.layers[0][0].element_size()
    for label, r in rows.items():
        params = json.loads(r["params"])
        if r["arm_name"] not in ("patch", "orbit") or params.get("granularity", "layer") != "layer":
            continue
        ranks = n_b if params["rank"] is None else channel_ranks(ctx, params["rank"])  # full rank on every channel
        if params.get("rotary_rank", "auto") != "auto":  # a k_pe / K rank set by the arm (Fig. 5's k_pe sweep)
            rotary = params["rotary_rank"] if params["rotary_rank"] is not None else n_b
            ranks = [params["rank"] if s.rotary is None else rotary for s in ctx.adapter.specs]
        layers = len(params.get("patched_layers", range(n_layers)))
        expect = layers * patch_numbers(ranks, n_b, widths(ctx)) * item
        assert r["bytes"] == expect, label
        assert r["recomputed_tokens"] == 0 and r["forwards"] >= 1, label  # the query (orbit: + its orderings)
    assert json.loads(rows["patch_r64_deep"]["params"])["patched_layers"] == [2, 3]  # the deep half of 4 layers


def test_token_arms_write_their_rows_on_every_layer_within_the_matched_budget(costs):
    rows, ctx, _ = costs
    n_layers, cell = ctx.adapter.n_layers, ctx.page_bytes() // (ctx.n_b * ctx.adapter.n_layers)
    for label, r in rows.items():
        if r["arm_name"] not in TOKEN_ARMS:
            continue
        n = json.loads(r["params"])["n_recomputed"]
        assert r["bytes"] == n * n_layers * cell, label
        assert r["recomputed_tokens"] >= n * n_layers and r["forwards"] >= 2, label  # recompute + query
    for label in ("first_k_r16", "quest_r16", "shadowkv_r16"):
        if label in rows:
            assert rows[label]["bytes"] <= rows["patch_r16"]["bytes"], label
    shallow = json.loads(rows["shallow_reprefill"]["params"])
    rerun = n_layers - shallow["reused_layers"]
    assert rows["shallow_reprefill"]["bytes"] == rerun * ctx.n_b * cell
    assert rows["shallow_reprefill"]["recomputed_tokens"] == (rerun + 1) * ctx.n_b  # plus the lead-in layer
