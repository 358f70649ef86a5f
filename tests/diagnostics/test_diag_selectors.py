"""Fig. 4(a): recall of the true top-50% ‖Δ‖ tokens by cheap selectors."""

from __future__ import annotations

import math

import pytest
import torch
from diag_support import context, toy_contexts
from tinyfamilies import TINY

from kamera.arms.oracle_topp import deficit_scores
from kamera.arms.tokens import count_of, top_rows
from kamera.diagnostics import selector_recall
from kamera.diagnostics.selectors import k_norm_scores, recall
from kamera.items.spans import Span
from kamera.reuse.context import ReuseContext

ALL = ("oracle", "cross_mass", "first_k", "k_norm", "random")


def hypergeometric_sd(n: int, k: int) -> float:
    """SD of one random k-subset's recall of a fixed k-subset of n (|overlap| is hypergeometric)."""
    var = k * (k / n) * (1 - k / n) * (n - k) / (n - 1)
    return math.sqrt(var) / k


@pytest.mark.parametrize("name", TINY)
def test_oracle_recalls_everything_and_random_recalls_about_half(tiny, name):
    ctx = context(tiny, name)
    draws = 200
    records = selector_recall(ctx, ALL, draws=draws)
    assert [r["selector"] for r in records] == list(ALL)
    assert {tuple(sorted(r)) for r in records} == {("fraction", "k", "n_b", "quantity", "selector", "value")}
    got = {r["selector"]: r["value"] for r in records}
    n, k = ctx.n_b, count_of(0.5, ctx.n_b)
    assert all(r["k"] == k and r["n_b"] == n for r in records)
    assert got["oracle"] == 1.0
    # E[recall] = k / n exactly; the mean of `draws` independent draws has SD hypergeometric_sd / √draws
    assert abs(got["random"] - k / n) <= 4 * hypergeometric_sd(n, k) / math.sqrt(draws)
    assert abs(k / n - 0.5) <= 1 / n
    assert all(0.0 <= v <= 1.0 for v in got.values())


def test_toy_selectors_and_seeded_random(tiny):
    for ctx in toy_contexts():
        first = selector_recall(ctx, ALL, seed=3)
        assert first == selector_recall(ctx, ALL, seed=3)  # seeded: reproducible
        assert first[0]["value"] == 1.0


def test_each_selector_picks_what_its_arm_picks(tiny):
    ctx = context(tiny, "tiny_qwen2_5_vl")
    k = count_of(0.5, ctx.n_b)
    truth = top_rows(deficit_scores(ctx), k)
    got = {r["selector"]: r["value"] for r in selector_recall(ctx, ("first_k", "k_norm"))}
    assert got["first_k"] == recall(torch.arange(k), truth)
    keys = sum(chans[0].double().pow(2).flatten(1).sum(1) for chans in ctx.canonical.layers)
    assert got["k_norm"] == recall(top_rows(keys, k), truth)
    # R(δ) preserves norms: the relocated canonical ranks tokens the same way
    moved = sum(chans[0].double().pow(2).flatten(1).sum(1) for chans in ctx.relocated.layers)
    torch.testing.assert_close(k_norm_scores(ctx), moved, rtol=1e-5, atol=0)


def test_recall_of_index_sets():
    assert recall(torch.tensor([0, 1, 2]), torch.tensor([2, 3, 4])) == pytest.approx(1 / 3)
    assert recall(torch.tensor([], dtype=torch.long), torch.tensor([1])) == 0.0
    with pytest.raises(ValueError, match="empty"):
        recall(torch.tensor([1]), torch.tensor([], dtype=torch.long))
    with pytest.raises(ValueError, match="distinct"):
        recall(torch.tensor([1, 1]), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="1-D"):
        recall(torch.tensor([[1, 2]]), torch.tensor([1, 2]))


def test_selector_recall_rejects_bad_inputs(tiny):
    ctx = context(tiny, "tiny_llava")
    with pytest.raises(ValueError, match="unknown selector"):
        selector_recall(ctx, ("oracle", "psychic"))
    with pytest.raises(ValueError, match="none given"):
        selector_recall(ctx, ())
    for bad in (0.0, 1.5, "half", True):
        with pytest.raises(ValueError, match="fraction"):
            selector_recall(ctx, fraction=bad)
    with pytest.raises(ValueError, match="draws"):
        selector_recall(ctx, draws=0)
    no_a = ReuseContext(ctx.adapter, [Span("prefix", ("Answer.",)), Span("B", ("the ball is red",)),
                                      Span("query", ("Colour? Answer:",))])
    with pytest.raises(ValueError, match="A span"):
        selector_recall(no_a, ("cross_mass",))
