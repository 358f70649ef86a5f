"""The agent replay's exact identities on the toy window model (gate tier: a few seconds).

- ``recompute`` reproduces itself (two replays on fresh contexts: the same logits, bit for bit);
- ``kamera`` with a full-rank patch formed at every changed antecedent equals ``recompute`` at every step;
- ``prefix`` is exact on a trace whose window only grows at the end, and prefills only the new chunk;
- ``relocate`` is exact on a trace where no chunk's antecedents change;
- the store never serves a patch formed behind another antecedent: one antecedent chunk's content swapped, the
  chunks behind it are formed again (and exact), while the unswapped replay on the same store hits.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from kamera.agent.policies import make_policy
from kamera.agent.replay import replay
from kamera.agent.store import Store
from kamera.agent.trace import Trace, doc, video, web
from kamera.models import load_model
from kamera.toy.window_task import state, window_item
from kamera.window.context import WindowContext

FLOOR = 1e-9  # float32 rounding of the toy model's logits, read as a float64 KL
FULL = {"rank": None, "store_as": "patch", "survivors": "patch", "orbit": False, "cascade": "eager"}


@pytest.fixture(scope="module")
def toy():
    return load_model("toy_window")


def ctx(adapter, item=None):
    return WindowContext(adapter, item or window_item(adapter.task, "recall", 0))


def actions(rows: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        for k, v in json.loads(r["actions"]).items():
            out[k] = out.get(k, 0) + v
    return out


def test_recompute_reproduces_itself(toy):
    tr = web(11, 4, 6, 0.3)
    a = replay(ctx(toy), tr, [("recompute", make_policy("recompute"))])["recompute"]
    b = replay(ctx(toy), tr, [("recompute", make_policy("recompute"))])["recompute"]
    assert [r["kl"] for r in a] == [0.0] * len(a) and all(r["agree"] for r in a)
    strip = ("seconds",)
    assert [{k: v for k, v in r.items() if k not in strip} for r in a] == [
        {k: v for k, v in r.items() if k not in strip} for r in b
    ]
    assert [r["tokens"] for r in a] == [r["n_window_tokens"] for r in a]


@pytest.mark.parametrize(
    "trace", [web(11, 4, 8, 0.3), video(11, 4, 8, 0.5, 0.4, seed=1), doc(11, 4, 8)], ids=lambda t: t.kind
)
def test_full_rank_kamera_is_recompute(toy, trace):
    rows = replay(
        ctx(toy), trace, [("recompute", make_policy("recompute")), ("full", make_policy("kamera", **FULL))]
    )
    full = rows["full"]
    assert max(r["kl"] for r in full) < FLOOR and all(r["agree"] for r in full)
    acts = actions(full)
    assert acts.get("survivor", 0) == acts.get("orbit", 0) == 0
    if (
        trace.kind != "web"
    ):  # a revisited window reads its stored full-rank patches: the patch path is exercised
        assert acts["hit"] > 0 and sum(r["svds"] for r in full) > 0


def test_prefix_exact_on_a_growing_window(toy):
    tr = Trace("grow", tuple(tuple(range(n)) for n in range(1, 8)))
    rows = replay(ctx(toy), tr, [("prefix", make_policy("prefix"))])["prefix"]
    assert max(r["kl"] for r in rows) < FLOOR
    wctx = ctx(toy)
    assert [r["tokens"] for r in rows] == [wctx.chunks[n].n_tokens for n in range(7)]  # only the new chunk
    assert [r["forwards"] for r in rows] == [1] * 7


def test_relocate_exact_without_antecedent_change(toy):
    tr = Trace("stable", ((0, 1, 2), (0, 1), (0, 1, 2, 3), (0, 1, 2), (0, 1, 2, 3, 4)))
    rows = replay(ctx(toy), tr, [("relocate", make_policy("relocate"))])["relocate"]
    assert max(r["kl"] for r in rows) < FLOOR
    assert [r["tokens"] for r in rows][1:] == [0, 5, 0, 5]  # each chunk prefilled once


def test_relocate_is_not_exact_when_antecedents_change(toy):
    """The control: a slide changes every survivor's antecedents, and R(δ) alone does not follow."""
    rows = replay(ctx(toy), web(11, 4, 6, 0.0), [("relocate", make_policy("relocate"))])["relocate"]
    assert max(r["kl"] for r in rows) > 1e-3


def test_store_never_serves_a_patch_of_another_antecedent(toy):
    item = window_item(toy.task, "recall", 0)
    old = item.history[1].meta["colour_of"]
    colours = toy.task.colours
    swapped = state([(o, colours[(colours.index(c) + 1) % len(colours)]) for o, c in old.items()])
    other = dataclasses.replace(item, history=(item.history[0], swapped, *item.history[2:]))
    tr = Trace("fixed", ((0, 1, 2, 3, 5),))
    pol = [("kamera", make_policy("kamera", **FULL))]
    store = Store()
    first = replay(ctx(toy, item), tr, pol, stores={"kamera": store})["kamera"]
    assert actions(first) == {"form": 4, "leading": 1, "recall": 0}
    again = replay(ctx(toy, item), tr, pol, stores={"kamera": store})["kamera"]  # same contents: served
    assert actions(again) == {"hit": 4, "leading": 1, "recall": 0} and again[0]["tokens"] == 0
    moved = replay(ctx(toy, other), tr, pol, stores={"kamera": store})["kamera"]
    # chunk 1's content changed: chunk 1 itself and every chunk behind it is formed again, none served
    assert actions(moved) == {"form": 4, "leading": 1, "recall": 0}
    assert moved[0]["kl"] < FLOOR and moved[0]["agree"]


def test_offline_placement_is_the_optimum_of_its_symbolic_cost(toy):
    """The search's order sequence costs (symbolically) exactly the minimum over every order sequence, enumerated."""
    from itertools import permutations, product
    from types import SimpleNamespace

    from kamera.agent.replay import digests

    wctx = ctx(toy)
    pol = make_policy("kamera_offline")
    for tr in (doc(11, 3, 4, 0.3), video(11, 3, 4, 0.5, 0.4, seed=1), web(11, 3, 4, 0.5)):
        ids = digests(wctx)

        def cost(seq, ids=ids):
            sim = SimpleNamespace(
                digests=ids, n_tokens=lambda c: wctx.chunks[c].n_tokens, store=set(), live={}
            )
            return sum(pol.advance(sim, order) for order in seq)

        s = SimpleNamespace(digests=ids, n_tokens=lambda c: wctx.chunks[c].n_tokens)
        plan = pol.search(s, tr)
        best = min(cost(seq) for seq in product(*(permutations(w) for w in tr.steps)))
        assert cost(plan) == best and [set(o) for o in plan] == [set(w) for w in tr.steps]
    rows = replay(wctx, doc(11, 3, 4, 0.3), [("off", pol)])["off"]
    assert [json.loads(r["placed"]) for r in rows] == [list(o) for o in pol.search(s, doc(11, 3, 4, 0.3))]


def test_offline_placement_refuses_a_trace_too_long_to_search():
    assert make_policy("kamera_offline", limit=1296).problems(window=3, steps=4) == []  # 6^4 = 1,296
    (line,) = make_policy("kamera_offline", limit=100).problems(window=3, steps=4)
    assert "4 steps of up to 3 chunks have 1,296 order sequences, above limit=100" in line
