"""The window probes' exact identities and forward counts on a tiny random model of each attention kind.

GQA (tiny_qwen2_5_vl, M-RoPE), MLA (tiny_kimi), MHA (tiny_llava), on synthetic streams of noise frames
(window k = 3: history of 7 frames, 4 frames of another clip).
"""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from kamera.core import ChunkKV, Patch, deficit, max_rel_diff, same_positions
from kamera.metrics import kl
from kamera.window import Layout, WindowContext, make_probe
from kamera.window.benches.synthetic import window_items
from kamera.window.context import overwrite
from kamera.window.probes import ProbeRefusal
from kamera.window.probes.recall import recall_stream
from kamera.window.probes.reorder import orbit_patch

# one worker runs this module: its module-scoped fixtures are built once, not once per xdist worker
pytestmark = pytest.mark.xdist_group("window-probes")

FAMILIES = ("tiny_qwen2_5_vl", "tiny_kimi", "tiny_llava")
K = 3
TAUS = (0.0, 1 / 3, 2 / 3, 1.0)
EXACT = 1e-5  # float32 relative error of an exact identity, worst layer and channel


def worst(a: ChunkKV, b: ChunkKV) -> float:
    return max(max_rel_diff(a, b).values())


@pytest.fixture(scope="module")
def items(tiny):
    return {name: window_items(tiny(name), 1, window=K, image_size=56)[0] for name in FAMILIES}


@pytest.fixture(scope="module")
def probed(tiny, items):
    """Every probe on one item per family, in a sweep order, with each probe's forwards by tag."""
    out = {}
    for name in FAMILIES:
        adapter = tiny(name)
        wctx = WindowContext(adapter, items[name])
        rows, spent = {}, {}
        for probe in (make_probe("recall", taus=TAUS), make_probe("forks"), make_probe("survivor"),
                      make_probe("reorder"), make_probe("deep_half"), make_probe("revert"),
                      make_probe("disposability"), make_probe("divergent"), make_probe("excess"),
                      make_probe("refresh", n_chunks=3, swaps=(0, 2))):
            before = adapter.forwards.copy()
            rows[probe.name] = probe.run(wctx)
            spent[probe.name] = +(adapter.forwards - before)
        out[name] = (wctx, rows, spent)
    return out


def pick(rows: list[dict], variant: str, setting: str | None = None) -> list[dict]:
    return [r for r in rows if r["variant"] == variant and (setting is None or r["setting"] == setting)]


# ----- recall ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_at_no_turnover_the_stale_patch_is_the_fresh_one(probed, name):
    wctx, rows, _ = probed[name]
    old, x, _ = recall_stream(K)
    view = wctx.view(Layout(old, x))
    stale = view.carry_patch(view.patch.truncate(32)).apply(view.relocated)
    fresh = view.patch.truncate(32).apply(view.relocated)
    assert worst(stale, fresh) == 0.0
    s, f = pick(rows["recall"], "stale_patch", "tau=0")[0], pick(rows["recall"], "fresh_exact", "tau=0")[0]
    assert s["kl"] == f["kl"] and s["pred"] == f["pred"]
    assert all(r["kl"] > s["kl"] for r in pick(rows["recall"], "stale_patch") if r["tau"] > 0)  # it goes stale


@pytest.mark.parametrize("name", FAMILIES)
def test_the_stored_patch_is_formed_at_eviction_and_replayed_after_the_window_turned_over(probed, name):
    """stored_patch is the eviction-time patch kept in the canonical's frame and relocated by R(δ) at the recall:
    nothing is paid there, it replays what the stale patch replays (to rounding, through two relocations), and
    once the window has turned over it is not the patch formed at the recall (it was formed before that existed)."""
    wctx, rows, _ = probed[name]
    old, x, _ = recall_stream(K)
    evicted = wctx.view(Layout(old, x))
    kept = evicted.store_patch(evicted.patch)
    assert same_positions(kept.positions, evicted.canonical.positions)
    assert not same_positions(kept.positions, evicted.native_positions(evicted.b))  # a real R(δ), δ ≠ 0
    stale, stored, exact = (pick(rows["recall"], v) for v in ("stale_patch", "stored_patch", "fresh_exact"))
    for s, st, e in zip(stale, stored, exact, strict=True):
        assert s["setting"] == st["setting"] == e["setting"]
        assert (st["forwards"], st["stored_forwards"]) == (0, s["stored_forwards"])  # read, not re-encoded
        assert st["kl"] == pytest.approx(s["kl"], rel=EXACT, abs=1e-12) and st["pred"] == s["pred"]
        if st["tau"] > 0:
            assert st["kl"] > e["kl"] * (1 + 1e-3)  # formed before the recall, it lacks the new window


@pytest.mark.parametrize("name", FAMILIES)
def test_a_full_rank_fresh_patch_is_the_re_prefill_of_the_recall_window(probed, name):
    wctx, _, _ = probed[name]
    old, x, new = recall_stream(K)
    for n in range(K + 1):
        view = wctx.view(Layout((*old[n:], *new[:n]), x))
        kv = view.patch.apply(view.relocated)
        assert worst(kv, view.conditioned) <= EXACT
        assert kl(view.reprefill_logits, view.query(kv).logits) <= 1e-6 * kl(view.reprefill_logits, view.blind.logits)


# ----- survivor ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_a_full_rank_removal_patch_is_the_re_prefill_of_the_slid_window(probed, name):
    wctx, rows, _ = probed[name]
    s = K - 2
    before = wctx.view(Layout(tuple(range(s)), s, tuple(range(s + 1, K))))
    slid = wctx.view(Layout(tuple(range(1, s)), s, tuple(range(s + 1, K + 1))))
    kept = slid.carry(before.conditioned)
    removal = Patch.form(deficit(slid.conditioned, kept))
    assert worst(removal.apply(kept), slid.conditioned) <= EXACT
    keep, rm = pick(rows["survivor"], "keep_as_is")[0], pick(rows["survivor"], "removal_patch")[0]
    assert keep["kl"] > 1e-9  # the evicted chunk left an influence on the kept KV …
    assert rm["kl"] <= 1e-6 * keep["kl"]  # … which the rank-64 (here full-rank) removal patch removes


@pytest.mark.parametrize("name", FAMILIES)
def test_keep_as_is_is_the_re_prefill_when_the_evicted_chunk_was_never_attended(tiny, items, name):
    """A constructed window: the leading chunk is masked from every later token, and there is no prefix (nor
    chat header), so relocating the survivor by −extent(evicted) changes no relative position it attended."""
    adapter = copy.copy(tiny(name))
    adapter.chat = None  # a chat header would be a prefix the survivor attends across the slide
    wctx = WindowContext(adapter, dataclasses.replace(items[name], prefix=None))
    rows = make_probe("survivor", mask_evicted=True).run(wctx)
    keep = pick(rows, "keep_as_is")[0]
    assert keep["kl"] <= 1e-9 and keep["pred"] == keep["ref_pred"]
    s = K - 2
    before = wctx.view(Layout(tuple(range(s)), s, tuple(range(s + 1, K)), masked=(0,)))
    slid = wctx.view(Layout(tuple(range(1, s)), s, tuple(range(s + 1, K + 1))))
    assert worst(slid.carry(before.conditioned), slid.conditioned) <= 1e-4
    assert max(max(layer) for layer in eval(keep["removal_rel_norm"])) <= 1e-4


# ----- leading ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_the_leading_chunk_is_its_stored_canonical(tiny, items, name):
    """A causal model's leading chunk depends on the prefix and itself only: the canonical prefilled behind the
    same prefix is its conditioned KV (δ = 0), so reusing it is exact and costs nothing."""
    rows = make_probe("leading").run(WindowContext(tiny(name), items[name]))
    lead = pick(rows, "leading")[0]
    assert lead["kv_rel_diff"] <= EXACT and lead["kl"] <= 1e-9 and lead["delta"] == 0
    assert (lead["forwards"], lead["bytes"]) == (0, 0) and lead["pred"] == lead["ref_pred"]


# ----- reorder -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_an_orbit_over_one_ordering_is_that_orderings_exact_patch(probed, name):
    wctx, rows, _ = probed[name]
    view = wctx.view(Layout((2, 0, 1), K))
    one = orbit_patch([view])
    assert worst(one.apply(view.relocated), view.patch.apply(view.relocated)) <= EXACT
    assert len(pick(rows["reorder"], "orbit")) == math.factorial(K) - 1
    for r in pick(rows["reorder"], "exact"):
        assert r["delta_rel"] > 0 and r["n_orderings"] == 6 and r["exhaustive"]


# ----- App. E ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_clean_view_revert_is_bitwise_the_stored_canonical(probed, name):
    wctx, rows, _ = probed[name]
    for variant in ("revert", "readd"):
        r = pick(rows["revert"], variant)[0]
        assert r["exact_kv"] is True and r["exact_logits"] is True, variant
    view = wctx.view(Layout(tuple(range(K)), K))
    live = view.splice(view.patch.apply(view.relocated))
    start, stop = view.ranges[view.b]
    overwrite(wctx.adapter, live, start, view.relocated)
    back = wctx.adapter.read(live, start, stop, view.native_positions(view.b))
    assert all(torch.equal(a, b) for la, lb in zip(back.layers, view.relocated.layers, strict=True)
               for a, b in zip(la, lb, strict=True))
    with pytest.raises(ValueError, match="do not fit"):
        overwrite(wctx.adapter, live, stop, view.relocated)


@pytest.mark.parametrize("name", FAMILIES)
def test_forks_share_one_canonical_and_pay_a_patch_each(probed, name):
    _, rows, _ = probed[name]
    forks = pick(rows["forks"], "fork")
    assert len(forks) == K + 1 and all(r["shares_canonical"] for r in forks)
    assert all(r["bytes"] > 0 and r["bytes_duplicated"] == r["bytes_shared"] for r in forks)
    on, off = pick(rows["disposability"], "patch_on")[0], pick(rows["disposability"], "patch_off")[0]
    assert off["kl"] == pick(rows["revert"], "blind")[0]["kl"]  # toggled off = the canonical = blind reuse
    assert on["disposable"] == (on["answer"] == off["answer"])


# ----- forwards: each probe pays only what no earlier probe paid ---------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_forward_counts_per_probe(probed, name):
    _, rows, spent = probed[name]
    n_tau = len(TAUS)
    assert spent["recall"] == {"full": n_tau, "solo": 1, "blind": n_tau, "stale_patch": n_tau, "stored_patch": n_tau,
                               "fresh_exact": n_tau}
    assert spent["forks"] == {"fork": K + 1}  # every branch's re-prefill, canonical and blind were the recall's
    assert spent["survivor"] == {"full": 2, "solo": 1, "blind": 1, "keep_as_is": 1, "removal_patch": 1}
    tests = math.factorial(K) - 1  # the identity ordering is the recall's eviction-time window
    assert spent["reorder"] == {"full": tests, "blind": tests, "transfer": tests, "exact": tests, "orbit": tests}
    assert spent["deep_half"] == {"patch": 1, "patch_deep": 1}
    assert spent["revert"] == {"patch": 1, "revert": 1, "readd": 1}
    assert spent["disposability"] == {"disposability_on": 1, "disposability_off": 1}
    # the measured cost columns: what a variant pays at the operation, and what stored state it reads
    cost = {(r["variant"], r["setting"]): (r["forwards"], r["stored_forwards"]) for r in rows["recall"]}
    assert cost[("reprefill", "tau=1")] == (1, 0) and cost[("blind", "tau=1")] == (0, 1)
    assert cost[("stale_patch", "tau=1")] == (0, 2) and cost[("fresh_exact", "tau=1")] == (1, 1)
    assert cost[("stored_patch", "tau=1")] == (0, 2)  # the patch stored at eviction: nothing paid at the recall
    orbit = pick(rows["reorder"], "orbit")[0]
    assert (orbit["forwards"], orbit["stored_forwards"]) == (0, math.factorial(K) - 1 + 1)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_row_has_the_arm_row_columns(probed, name):
    _, rows, _ = probed[name]
    base = {"probe", "variant", "item_id", "setting", "kl", "kl_blind", "eta", "flip", "recovered", "pred", "gold",
            "correct", "bytes", "bytes_frac", "forwards", "stored_forwards", "params"}
    for probe, got in rows.items():
        assert got, probe
        for r in got:
            assert base <= set(r), (probe, base - set(r))
            assert r["kl"] >= 0 and r["bytes"] >= 0
        ref = pick(got, "reprefill")
        assert all(r["kl"] == 0.0 for r in ref), probe
        keys = [(r["setting"], r["variant"]) for r in got]
        assert len(set(keys)) == len(keys), probe  # (probe, setting, variant) is the row's key within an item


def test_refusals_and_bad_layouts(tiny, items):
    adapter = tiny("tiny_qwen2_5_vl")
    short = dataclasses.replace(items["tiny_qwen2_5_vl"], history=items["tiny_qwen2_5_vl"].history[:4], foreign=())
    wctx = WindowContext(adapter, short)
    with pytest.raises(ProbeRefusal, match="needs ≥ 7 history"):
        make_probe("recall").run(wctx)
    with pytest.raises(ProbeRefusal, match="foreign"):
        make_probe("excess").run(wctx)
    with pytest.raises(ProbeRefusal, match="surviving chunk"):
        make_probe("survivor", survivor=0).run(wctx)
    with pytest.raises(ValueError, match="no chunk id 9"):
        wctx.view(Layout((0,), 9))
    view = wctx.view(Layout((0, 1), 2))
    with pytest.raises(ValueError, match="tokens"):
        view.carry(wctx.view(Layout((0,), 1)).conditioned.slice(0, 1))
    with pytest.raises(ValueError, match="canonical_context"):
        WindowContext(adapter, short, canonical_context="native")
    with pytest.raises(KeyError, match="no resource"):
        wctx.cost([("full", Layout((3,), 0))])
