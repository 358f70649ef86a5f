"""The shared-basis table (App. C.2) on hand-built deficit_basis records: a basis shared by every item keeps what
each item's own SVD keeps, directions private to the training items keep nothing of a held-out item; the split,
the golden markdown / LaTeX, the paper's value beside a paper model only, and bad inputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rows_support import probe_record

from experiments import basis

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
WIDTH = 4


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("KAMERA_REGOLD"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file"


def records(model: str, shared: bool, n: int = 8) -> list[dict]:
    """n items, one layer, channels K (rotary) and V of width 4, top-2 directions. ``shared``: every item's Δ lies
    in span(e0, e1) with item-dependent σ; otherwise each item's directions are its own pair of unit axes, so the
    training items' span misses the held-out items' wherever the split puts them on the other axes. K is also
    recorded in the unrotated frame, where its directions are always span(e0, e1) (as if the items' private axes
    were one direction turned by their positions)."""
    out = []
    eye = np.eye(WIDTH)
    for i in range(n):
        s = [2.0 + 0.1 * i, 1.0]
        v = eye[[0, 1]] if shared else eye[[i % 2 * 2, i % 2 * 2 + 1]]
        for channel, frame, dirs in (("k", "native", v), ("k", "unrotated", eye[[0, 1]]), ("v", "native", v)):
            out.append(probe_record(model, f"{model}-{i}", "deficit_basis", layer=0, channel=channel, width=WIDTH,
                                    key_frame=frame, rotary=int(channel == "k"), k=2,
                                    energy=float(sum(x * x for x in s)) * 1.25, s=json.dumps(s),
                                    v=json.dumps(dirs.tolist())))
    return out


def patch_records(model: str, n: int = 8) -> list[dict]:
    """deficit_basis_patch records of n items at r = 2: KL_blind 1e-2 (item 0: 1e-5, below the η floor), the own
    patch at 1e-3 (η 0.9), the basis patch at 2e-3 (η 0.8) native and 1e-3 unrotated."""
    return [probe_record(model, f"{model}-{i}", "deficit_basis_patch", r=2, key_frame=frame,
                         kl_blind=1e-5 if i == 0 else 1e-2, kl_own=1e-3, kl_basis=kl_basis)
            for i in range(n) for frame, kl_basis in (("native", 2e-3), ("unrotated", 1e-3))]


def test_a_shared_basis_keeps_what_the_own_svd_keeps(tmp_path):
    probes = pd.DataFrame(records("qwen2_5_vl_7b", shared=True) + records("tiny_qwen2_5_vl", shared=True))
    t = basis.frame(probes)
    assert list(t.index) == [("qwen2_5_vl_7b", 1), ("qwen2_5_vl_7b", 2), ("tiny_qwen2_5_vl", 1), ("tiny_qwen2_5_vl", 2)]
    for key in t.index:
        assert t.at[key, "pooled / own"].startswith("1.00 [1.00, 1.00]"), key
        assert t.at[key, "own SVD keeps"] == t.at[key, "pooled basis keeps"]
    assert t.at[("qwen2_5_vl_7b", 2), "own SVD keeps"].startswith("0.80")  # ‖Δ‖² is 1.25× the kept σ²
    assert t.at[("qwen2_5_vl_7b", 1), "chance (r / width)"] == "0.25"
    assert t.at[("qwen2_5_vl_7b", 1), "items fit / held out"] == "4 / 4"
    assert "(paper ≈ 1)" in t.at[("qwen2_5_vl_7b", 2), "pooled / own"]
    assert "paper" not in t.at[("tiny_qwen2_5_vl", 2), "pooled / own"]
    assert t.at[("qwen2_5_vl_7b", 2), "η own SVD"] == "–"  # no deficit_basis_patch records: no η
    md, paths = basis.render(pd.concat([probes, pd.DataFrame(patch_records("tiny_qwen2_5_vl"))]), "golden",
                             tmp_path / "basis", "rows: fixed")
    golden("basis.md", md)
    golden("basis.tex", paths[1].read_text())


def test_private_directions_do_not_transfer():
    """Items on two disjoint axis pairs: a held-out item keeps s_0²‖W[a_0]‖² + s_1²‖W[a_1]‖² of its ‖Δ‖² (a_j its
    axes, W the pooled rank-2 basis), which falls below what its own SVD keeps wherever W misses its axes."""
    probes = basis.in_frame(pd.DataFrame(records("tiny_kimi", shared=False)), "native")
    train, held = basis.split(probes.drop_duplicates("item_id"))
    bases = basis.pooled_bases(probes[probes["item_id"].isin(train)], 2)
    got = basis.shares(probes[probes["item_id"].isin(held)], bases, [2]).set_index("item_id")
    w = bases[(0, "k")]
    for item, line in got.iterrows():
        i = int(item.rsplit("-", 1)[1])
        s0, s1, pair = 2.0 + 0.1 * i, 1.0, i % 2 * 2
        kept = s0**2 * float((w[pair] ** 2).sum()) + s1**2 * float((w[pair + 1] ** 2).sum())
        assert line["pooled"] == pytest.approx(kept / (1.25 * (s0**2 + s1**2)), abs=1e-9)
        assert line["own"] == pytest.approx(0.8)
    assert (got["pooled"] < got["own"] - 0.1).any()


def test_the_rotary_channel_is_read_in_each_frame():
    """Items whose K directions are private in the native frame and shared once un-rotated: K's pooled / own is
    below 1 native and 1.00 unrotated; the energy columns read the unrotated frame (K shared there, V private: between
    the native K's share and 1)."""
    t = basis.frame(pd.DataFrame(records("tiny_kimi", shared=False)))
    native, both = (float(t.at[("tiny_kimi", 2), c].split()[0]) for c in ("K pooled / own (native)", "pooled / own"))
    assert native < 0.9 and native + 0.05 < both < 1
    assert t.at[("tiny_kimi", 2), "K pooled / own (unrotated)"].startswith("1.00 [1.00, 1.00]")


def test_basis_patch_eta_over_the_held_out_items_with_a_measurable_deficit():
    """η = 1 − KL / KL_blind per held-out item, the item below the η floor left out: own 0.90, basis 0.80 native
    and 0.90 unrotated, blind's median KL beside them; the training half's records are not read."""
    probes = pd.DataFrame(records("tiny_qwen2_5_vl", shared=True))
    patch = pd.DataFrame(patch_records("tiny_qwen2_5_vl"))
    train, _ = basis.split(probes.drop_duplicates("item_id"))
    patch.loc[patch["item_id"].isin(train), "kl_basis"] = 1.0  # would pull η far below 0 if read
    row = basis.frame(probes, patch=patch).loc[("tiny_qwen2_5_vl", 2)]
    assert row["η own SVD"].startswith("0.90 [0.90, 0.90]")
    assert row["η basis (native)"].startswith("0.80 [0.80, 0.80]")
    assert row["η basis (unrotated)"].startswith("0.90 [0.90, 0.90]")
    assert row["KL blind (median)"] == "0.01"
    assert basis.frame(probes, patch=patch).loc[("tiny_qwen2_5_vl", 1), "η own SVD"] == "–"  # r = 1 not measured


def test_split_is_seeded_disjoint_and_keeps_clusters_together():
    items = pd.DataFrame({"item_id": [f"i{j}" for j in range(6)], "cluster_key": ["a", "a", "b", "b", "c", "c"]})
    train, held = basis.split(items)
    assert train.isdisjoint(held) and train | held == set(items["item_id"])
    assert all(({f"i{2 * c}", f"i{2 * c + 1}"} <= train) or ({f"i{2 * c}", f"i{2 * c + 1}"} <= held) for c in range(3))
    assert basis.split(items) == (train, held)


def test_render_refuses_without_records_or_a_split(tmp_path):
    with pytest.raises(SystemExit, match="no deficit_basis records"):
        basis.render(pd.DataFrame(records("m", True)).assign(knobs=json.dumps({"name": "energy"})), "g", tmp_path / "b")
    with pytest.raises(SystemExit, match="two clusters"):
        basis.render(pd.DataFrame(records("m", True, n=1)), "g", tmp_path / "b")


def test_the_probe_records_each_layer_channels_top_directions(tiny):
    """On tiny_kimi: one record per layer-channel, and one more per layer for the rotary channel un-rotated; the kept
    rows of Vᵀ are unit vectors with ‖Δ v_i‖ = σ_i (Δ as cached, or R(−p)Δ), σ descending, and ``energy`` is the whole
    ‖Δ‖² (the same in both frames); k is clamped to Δ's rank and must be ≥ 1."""
    from tinyfamilies import standard_spans

    from kamera.probes import make_probe
    from kamera.probes.deficit_basis import pair_rows, unrotate
    from kamera.reuse.context import ReuseContext

    adapter = tiny("tiny_kimi")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    recs = make_probe("deficit_basis", k=4).run(ctx)
    assert [(r["layer"], r["channel"], r["key_frame"]) for r in recs] == [
        (layer, s.name, f) for layer in range(adapter.n_layers) for s in adapter.specs
        for f in (("native", "unrotated") if s.rotary is not None else ("native",))]
    for rec in recs:
        c = [s.name for s in adapter.specs].index(rec["channel"])
        spec = adapter.specs[c]
        assert rec["rotary"] == int(spec.rotary is not None)
        t = ctx.deficit.layers[rec["layer"]][c].double()
        if rec["key_frame"] == "unrotated":
            t = unrotate(t, ctx.deficit.positions, spec.rotary, pair_rows(adapter, spec.rotary))
        delta = t.reshape(t.shape[0], -1)
        s, v = (np.asarray(json.loads(rec[x])) for x in ("s", "v"))
        assert v.shape == (4, rec["width"]) == (4, delta.shape[1]) and (np.diff(s) <= 0).all()
        assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
        assert np.allclose(np.linalg.norm(delta.numpy() @ v.T, axis=0), s, rtol=1e-3)
        assert rec["energy"] == pytest.approx(float(ctx.deficit.layers[rec["layer"]][c].double().norm() ** 2), rel=1e-5)
    assert make_probe("deficit_basis", k=10_000).run(ctx)[0]["k"] == min(ctx.n_b, recs[0]["width"])
    with pytest.raises(ValueError, match="k must be an int ≥ 1"):
        make_probe("deficit_basis", k=0)


@pytest.mark.parametrize("model", ["tiny_kimi", "tiny_qwen2_5_vl", "tiny_qwen3_vl"])
def test_unrotate_takes_keys_back_to_position_zero(tiny, model):
    """Layer 0's keys depend on each token and its position only, so R(−p) per token of B's layer-0 rotary channel,
    prefilled at its native positions, equals the same B prefilled with every position 0 (no rotation at all): 1-D
    RoPE (Kimi's k_pe), sectioned M-RoPE (Qwen2.5-VL) and interleaved M-RoPE (Qwen3-VL) with B's image tokens at
    their own (t, h, w). R(+p) undoes it. Reading every pair from the t row (the 1-D rule) misses on M-RoPE."""
    import dataclasses

    import torch
    from tinyfamilies import standard_spans

    from kamera.probes.deficit_basis import pair_rows, turn_tokens, unrotate

    adapter = tiny(model)
    enc = adapter.encode(standard_spans(adapter))
    b = enc.spans[enc.b]

    def layer0(span, start):
        out = adapter.forward([(span, start)], tag="test")
        return adapter.read(out.cache, 0, span.n_tokens, span.local_pos + start)

    placed = layer0(b, enc.starts[enc.b])
    zero = layer0(dataclasses.replace(b, local_pos=torch.zeros_like(b.local_pos)), 0)
    (c, spec), = [(c, s) for c, s in enumerate(adapter.specs) if s.rotary is not None]
    rows, keys, want = pair_rows(adapter, spec.rotary), placed.layers[0][c], zero.layers[0][c]

    def rel(x):
        return float((x.double() - want.double()).norm() / want.double().norm())

    assert rel(keys) > 0.1  # the cached keys are rotated
    assert rel(unrotate(keys, placed.positions, spec.rotary, rows)) < 1e-5
    back = turn_tokens(unrotate(keys, placed.positions, spec.rotary, rows), placed.positions, spec.rotary, rows, 1)
    assert float((back - keys).norm() / keys.norm()) < 1e-6
    if placed.positions.shape[0] == 3:
        assert rel(unrotate(keys, placed.positions, spec.rotary, torch.zeros_like(rows))) > 1e-3


@pytest.mark.parametrize("step", [0, 20])
def test_only_the_unrotated_k_frame_pools_items_that_item_offset_places_apart(tiny, tmp_path, step):
    """docs/metrics.md's K frame check on tiny_kimi, through the job's own path (ArmItems.select, evaluate_item):
    six synthetic items with ``item_offset=step``. At step 0 every item's B sits at one position and the two frames
    pool alike (0.98 / 0.99 at r = 2); placed 20 positions apart, items rotate each other's K directions, so the
    native frame's pooled basis keeps a fraction of what the own SVD keeps (0.64) while the unrotated frame, where
    a key direction is position-free, keeps as much as at step 0 (0.99)."""
    from pipeline.pipeline_support import job_config

    from kamera.arms.shape import ArmItems, evaluate_item
    from kamera.job.spec import build_specs

    cfg = job_config(tmp_path, "model=tiny_kimi", "n_items=6", f"item_offset={step}", "arms=[]",
                     "probes=[{deficit_basis: {k: 8}}]")
    adapter, probes = tiny("tiny_kimi"), build_specs("probe", cfg.probes)
    rows = pd.DataFrame([r for it in ArmItems().select(cfg, 6).items
                         for r in evaluate_item(adapter, it, [], probes, cfg, {"model": "tiny_kimi"})[1]])
    train, held = basis.split(rows.drop_duplicates("item_id"))
    ratio = {f: float(basis.energy_cells(rows[rows["item_id"].isin(train)], rows[rows["item_id"].isin(held)], [2])[2][
        4 + basis.FRAMES.index(f)].split()[0]) for f in basis.FRAMES}
    assert ratio["unrotated"] > 0.9
    assert abs(ratio["native"] - ratio["unrotated"]) < 0.02 if step == 0 else ratio["native"] < 0.8


def test_an_item_placed_past_the_models_context_fails_in_one_line(tiny, tmp_path):
    """item_offset moves the i-th item to i · item_offset; where that runs past the model's positions (tiny_kimi:
    8192) the item fails with an ItemError naming the offset and the context, not a silent wrap-around."""
    from pipeline.pipeline_support import job_config

    from kamera.arms.shape import ArmItems, evaluate_item
    from kamera.errors import ItemError

    cfg = job_config(tmp_path, "model=tiny_kimi", "n_items=2", "item_offset=9000", "arms=[blind]")
    first, second = ArmItems().select(cfg, 2).items
    assert (first.offset, second.offset) == (0, 9000)
    with pytest.raises(ItemError, match=r"item_offset=9000: offset 9000: the item would end at position \d+, "
                                         r"outside tiny_kimi's context of 8192; lower item_offset"):
        evaluate_item(tiny("tiny_kimi"), second, [], [], cfg, {})


def test_the_basis_patch_probe_reads_the_fit_the_renderer_writes(tiny, tmp_path):
    """The round trip of make basis's second pass on one tiny_qwen2_5_vl item: its deficit_basis records copied as
    four items, fit (experiments.basis.fit: the pooled basis is then the item's own directions), read by the probe.
    Native: the basis patch is the own rank-r patch (KL equal to rounding of the stored directions); at full rank
    the basis spans Δ in either frame, so the patch is Δ and its KL ≈ 0 (turning the un-rotated projection back by
    R(p) matters: without it the unrotated KL would be a rotated Δ's). ``fit: own`` is the own patch exactly; a
    missing fit file or a rank beyond the fit's directions is refused when the probe is built."""
    from tinyfamilies import standard_spans

    from kamera.probes import make_probe
    from kamera.reuse.context import ReuseContext

    adapter = tiny("tiny_qwen2_5_vl")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    full = min(ctx.n_b, min(s.width for s in adapter.specs))
    recs = make_probe("deficit_basis", k=full).run(ctx)
    rows = pd.DataFrame(
        [probe_record("tiny_qwen2_5_vl", f"i{i}", "deficit_basis", **r) for i in range(4) for r in recs]
    )
    path = tmp_path / "fit.npz"
    assert basis.fit(rows, {"tiny_qwen2_5_vl": path}) == [path]
    got = {
        (r["r"], r["key_frame"]): r for r in make_probe("deficit_basis_patch", fit=str(path), ranks=[2, full]).run(ctx)
    }
    assert all(r["kl_blind"] > 1e-4 for r in got.values())
    assert got[(2, "native")]["kl_basis"] == pytest.approx(got[(2, "native")]["kl_own"], rel=1e-3)
    assert got[(full, "native")]["kl_basis"] < 1e-9 and got[(full, "unrotated")]["kl_basis"] < 1e-9
    own = {(r["r"], r["key_frame"]): r for r in make_probe("deficit_basis_patch", ranks=[2]).run(ctx)}
    assert own[(2, "native")]["kl_basis"] == own[(2, "native")]["kl_own"] == pytest.approx(got[(2, "native")]["kl_own"])
    with pytest.raises(ValueError, match="does not exist"):
        make_probe("deficit_basis_patch", fit=str(tmp_path / "none.npz"))
    with pytest.raises(ValueError, match="exceed"):
        make_probe("deficit_basis_patch", fit=str(path), ranks=[full + 1])


@pytest.mark.integration
def test_basis_tiny_runs_and_renders(tmp_path):
    """``make basis``'s two passes at four items on tiny_qwen2_5_vl: the energy pass's records are one set per item,
    and on the held-out items the pooled basis keeps no more than the items' own SVD; ``--fit`` writes the model's
    fit file at its job's ``basis_fit``; the eta pass (the same shard: its deficit_basis records are not rerun)
    adds the basis patch's KLs and the table prints η for the held-out items."""
    from pipeline.pipeline_support import job_config

    from kamera.job import store
    from kamera.run import runner
    from kamera.sweep import expand

    sweep = ["experiment=basis_tiny", "n_items=4", "testbed=tiny_qwen2_5_vl", f"paths.results={tmp_path}/raw"]
    for job in expand([*sweep, "basis_pass=energy"]):
        runner.run(job_config(tmp_path, *job))
    basis.main(["--fit", *sweep])
    for step in (0, 20):  # one fit per placement (the sweep's item_offset)
        assert (tmp_path / "raw" / "basis_fit" / "basis_tiny" / f"tiny_qwen2_5_vl-at{step}.npz").is_file()
    for job in expand([*sweep, "basis_pass=eta"]):
        runner.run(job_config(tmp_path, *job))
    basis.main([*sweep, "basis_pass=eta", "--out", str(tmp_path / "basis")])
    shards = store.shards(tmp_path / "raw", "basis_tiny")
    assert len(shards) == 2
    recs = next(s.probes() for s in shards if s.meta()["config"]["item_offset"] == 0)  # the job as laid out
    energy = recs[recs["probe"] == "deficit_basis[k=8]"]
    assert energy.groupby("item_id").size().nunique() == 1 and energy["item_id"].nunique() == 4
    assert energy["run_index"].eq(0).all()  # written by the first pass only
    t = basis.frame(energy, patch=recs[recs["probe"].str.startswith("deficit_basis_patch")])
    assert [r for _, r in t.index] == [1, 2, 4, 8]
    own = t["own SVD keeps"].str.split(" ").str[0].astype(float)
    pooled = t["pooled basis keeps"].str.split(" ").str[0].astype(float)
    assert (pooled <= own + 1e-9).all() and (own.diff().dropna() > 0).all()
    assert t.loc[("tiny_qwen2_5_vl", 1), "η own SVD"] == "–" and t.loc[("tiny_qwen2_5_vl", 8), "η own SVD"] != "–"
    table = (tmp_path / "basis.md").read_text()
    assert "| tiny_qwen2_5_vl | 1 | 2 / 2 |" in table and "| tiny_qwen2_5_vl · item i at i·20 | 1 | 2 / 2 |" in table


def test_a_basis_fit_on_one_task_is_scored_on_another():
    """Two tasks of one model: where both tasks' deficits lie in one span the basis fit on either keeps all of the
    other's (pooled / own 1), where each task has its own span it keeps nothing (0); one task: no transfer lines."""

    def task(subset: str, axes: list[int]) -> pd.DataFrame:
        rows = pd.DataFrame(records("qwen2_5_vl_7b", shared=True, n=4))
        eye = np.eye(WIDTH)
        rows["v"] = json.dumps(eye[axes].tolist())
        return rows.assign(subset=subset, item_id=rows["item_id"] + subset)

    same = basis.frame(pd.concat([task("a", [0, 1]), task("b", [0, 1])]))
    moved = basis.frame(pd.concat([task("a", [0, 1]), task("b", [2, 3])]))
    for pair in ("a → mmlongbench_doc · b", "b → mmlongbench_doc · a"):
        label = f"qwen2_5_vl_7b · mmlongbench_doc · {pair}"
        assert same.loc[(label, 2), "pooled / own"].startswith("1.00")
        assert moved.loc[(label, 2), "pooled / own"].startswith("0.00")
    alone = basis.frame(task("a", [0, 1]))
    assert not any("→" in str(m) for m in alone.index.get_level_values(0))
