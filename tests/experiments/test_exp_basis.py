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
    """n items, one layer, channels K and V of width 4, top-2 directions. ``shared``: every item's Δ lies in
    span(e0, e1) with item-dependent σ; otherwise each item's directions are its own pair of unit axes, so the
    training items' span misses the held-out items' wherever the split puts them on the other axes."""
    out = []
    eye = np.eye(WIDTH)
    for i in range(n):
        s = [2.0 + 0.1 * i, 1.0]
        v = eye[[0, 1]] if shared else eye[[i % 2 * 2, i % 2 * 2 + 1]]
        for channel in ("k", "v"):
            out.append(probe_record(model, f"{model}-{i}", "deficit_basis", layer=0, channel=channel, width=WIDTH,
                                    k=2, energy=float(sum(x * x for x in s)) * 1.25, s=json.dumps(s),
                                    v=json.dumps(v.tolist())))
    return out


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
    md, paths = basis.render(probes, "golden", tmp_path / "basis", "rows: fixed")
    golden("basis.md", md)
    golden("basis.tex", paths[1].read_text())


def test_private_directions_do_not_transfer():
    """Items on two disjoint axis pairs: a held-out item keeps s_0²‖W[a_0]‖² + s_1²‖W[a_1]‖² of its ‖Δ‖² (a_j its
    axes, W the pooled rank-2 basis), which falls below what its own SVD keeps wherever W misses its axes."""
    probes = pd.DataFrame(records("tiny_kimi", shared=False))
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
    """On tiny_kimi: one record per layer-channel; the kept rows of Vᵀ are unit vectors with ‖Δ v_i‖ = σ_i, σ
    descending, and ``energy`` is the whole ‖Δ‖²; k is clamped to Δ's rank and must be ≥ 1."""
    from tinyfamilies import standard_spans

    from kamera.probes import make_probe
    from kamera.reuse.context import ReuseContext

    adapter = tiny("tiny_kimi")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    recs = make_probe("deficit_basis", k=4).run(ctx)
    assert [(r["layer"], r["channel"]) for r in recs] == [(layer, s.name) for layer in range(adapter.n_layers)
                                                         for s in adapter.specs]
    for rec in recs:
        c = [s.name for s in adapter.specs].index(rec["channel"])
        delta = ctx.deficit.matrix(rec["layer"], c).double()
        s, v = (np.asarray(json.loads(rec[x])) for x in ("s", "v"))
        assert v.shape == (4, rec["width"]) == (4, delta.shape[1]) and (np.diff(s) <= 0).all()
        assert np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
        assert np.allclose(np.linalg.norm(delta.numpy() @ v.T, axis=0), s, rtol=1e-3)
        assert rec["energy"] == pytest.approx(float(delta.norm() ** 2), rel=1e-5)
    assert make_probe("deficit_basis", k=10_000).run(ctx)[0]["k"] == min(ctx.n_b, recs[0]["width"])
    with pytest.raises(ValueError, match="k must be an int ≥ 1"):
        make_probe("deficit_basis", k=0)


@pytest.mark.integration
def test_basis_tiny_runs_and_renders(tmp_path):
    """``make basis``'s path at four items on tiny_qwen2_5_vl: the probe's records are one per item and
    layer-channel, and on the held-out items the pooled basis keeps no more than the items' own SVD."""
    from pipeline.pipeline_support import job_config

    from kamera.job import store
    from kamera.run import runner
    from kamera.sweep import expand

    sweep = ["experiment=basis_tiny", "n_items=4", "testbed=tiny_qwen2_5_vl", f"paths.results={tmp_path}/raw"]
    for job in expand(sweep):
        runner.run(job_config(tmp_path, *job))
    basis.main([*sweep, "--out", str(tmp_path / "basis")])
    recs = pd.concat([s.probes() for s in store.shards(tmp_path / "raw", "basis_tiny")])
    assert recs.groupby("item_id").size().nunique() == 1 and recs["item_id"].nunique() == 4
    t = basis.frame(recs)
    assert [r for _, r in t.index] == [1, 2, 4, 8]
    own = t["own SVD keeps"].str.split(" ").str[0].astype(float)
    pooled = t["pooled basis keeps"].str.split(" ").str[0].astype(float)
    assert (pooled <= own + 1e-9).all() and (own.diff().dropna() > 0).all()
    assert "| tiny_qwen2_5_vl | 1 | 2 / 2 |" in (tmp_path / "basis.md").read_text()


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
