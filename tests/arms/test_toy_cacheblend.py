"""Why LMCache's CacheBlend equals blind reuse on the toy's two-hop items (Table 5 tiny: flip-recover 0.00, mean KL
blind's; docs/baselines.md §1, "On the toy binding model"): the deficit is all in layer 1 (layer 0's KV never sees
A), and one row of B decides the answer, ranked high by its ‖ΔV‖² but low by its ‖ΔK‖², so LMCache's key rule
(8 rows at 0.15 of the 56 cached tokens) leaves it out while the same count by ‖ΔV‖² takes it; the check layer's
kept rows are recomputed (it is not a layer the arm skips)."""

from __future__ import annotations

import pytest

from kamera.arms import make_arm
from kamera.job.spec import build_specs
from kamera.metrics import kl
from kamera.reuse.context import ReuseContext
from kamera.toy.items import toy_items


@pytest.fixture(scope="module")
def toy_ctx(tiny):
    """Two-hop item 0-3 of the toy binding task (n_B 35, a 58-token prompt): blind reuse flips its answer."""
    adapter = tiny("toy_binding")
    item = next(it for it in toy_items(adapter, n_items=16, seed=0) if it.item_id == "two_hop-0-3")
    return ReuseContext(adapter, item.spans())


def test_lmcache_misses_the_row_that_decides_the_toy_item(toy_ctx):
    ctx = toy_ctx
    blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    assert blind > 1  # a flipped item
    for c in range(2):  # layer 0: rounding of the relocation only (its KV depends on each token and position)
        assert float(ctx.deficit.layers[0][c].norm() / ctx.conditioned.layers[0][c].norm()) < 1e-6
    dk, dv = (ctx.deficit.layers[1][c].pow(2).flatten(1).sum(1) for c in range(2))
    row = int(dv.argmax())  # on this item the decisive row is the one with the largest ‖ΔV‖²
    layers = [tuple(t.clone() for t in chans) for chans in ctx.relocated.layers]
    for c in range(2):
        layers[1][c][row] = ctx.conditioned.layers[1][c][row]
    assert kl(ctx.reprefill_logits, ctx.query(ctx.relocated.with_layers(layers)).logits) < 1e-9  # that row alone
    assert int((dk > dk[row]).sum()) + 1 > 8  # its rank by ‖ΔK‖² (24 here)

    lmcache = build_specs("arm", ["cacheblend_lmcache"])[0].plugin
    out = lmcache.run(ctx)
    assert out.params["n_recomputed"] == 8 == int(0.15 * ctx.ranges[ctx.b][1])  # the cached tokens, query left out
    assert kl(ctx.reprefill_logits, out.out.logits) == pytest.approx(blind, rel=1e-3)  # its 8 rows change ~nothing
    by_value = make_arm("cacheblend", ratio=0.15, deviation="value", count="context", at_least_one=True).run(ctx)
    assert by_value.params["n_recomputed"] == 8 and kl(ctx.reprefill_logits, by_value.out.logits) < 1e-9
