"""Window jobs through the real pipeline: model × window benchmark × window probes → rows in a shard, with the
arm jobs' identity, preflight, resume, completeness, refusal and failed-item semantics (issue 13, phase 2).

Jobs run the trained toy window model on its own streams (seconds); a tiny family and the Video-MME fixture
cover the other window benchmarks.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments import table1
from kamera import job
from kamera.data import make_fixture
from kamera.items.spans import Clip
from kamera.job import JobError
from kamera.job.store import shards
from kamera.models import load_model
from kamera.run import runner
from kamera.sweep import compose_config, status
from kamera.sweep import main as sweep
from kamera.toy.window_task import window_item
from kamera.window import WindowContext, make_probe
from kamera.window import shape as window_shape
from kamera.window.benches import toy as window_toy


def job_config(tmp_path, *overrides: str):
    """A job's config as the CLI composes it, its results and outputs under ``tmp_path``."""
    return compose_config([f"paths.results={tmp_path}/raw", f"paths.outputs={tmp_path}/out", *overrides])


TOY = ("experiment=table1_tiny", "testbed=toy_window", "bench.subset='recall,survivor'", "n_items=2")


@pytest.fixture(scope="session")
def jobs(tmp_path_factory):
    """A window job (the toy, recall + survivor on 2 items of each stream) and an arm job, one results root."""
    tmp = tmp_path_factory.mktemp("window-jobs")
    window = runner.run(job_config(tmp, *TOY))
    arm = runner.run(job_config(tmp, "experiment=table3_tiny", "testbed=tiny_llava", "arms=[blind]", "n_items=1"))
    return tmp, window, arm


def shard_of(path) -> tuple[pd.DataFrame, dict]:
    return pd.read_parquet(path), json.loads(path.with_suffix(".json").read_text())


def test_a_window_job_stores_one_row_per_item_probe_setting_variant_with_the_arm_rows_columns(jobs):
    _, window, arm = jobs
    rows, meta = shard_of(window)
    arm_rows, arm_meta = shard_of(arm)
    assert set(arm_rows.columns) <= set(rows.columns), set(arm_rows.columns) - set(rows.columns)
    assert (rows["shape"] == "window").all() and "shape" not in arm_rows
    assert meta["identity"]["config"]["shape"] == "window" and "shape" not in arm_meta["identity"]["config"]
    assert meta["config_key"] != arm_meta["config_key"]
    # the store keys rows by (item, plugin label, knobs): here the window probe
    assert set(rows["arm"]) == {"recall", "survivor"} and (rows["arm"] == rows["probe"]).all()
    assert not rows.duplicated(["item_id", "probe", "setting", "variant"]).any()
    recall = rows[rows["probe"] == "recall"]
    assert sorted(recall["item_id"].unique()) == ["recall-0-0", "recall-0-1"]
    assert len(recall) == 2 * 6 * 5  # items × τ × (reprefill, blind, stale, fresh stored, fresh exact)
    assert (rows["context_bytes"] > 0).all() and (rows["seconds"] > 0).all()
    # a probe meets only the stream built for it; the other pairs are recorded refusals with the reason
    refused = {(r["item_id"], r["arm"]) for r in meta["refusals"]}
    assert refused == {("recall-0-0", "survivor"), ("recall-0-1", "survivor"),
                       ("survivor-0-0", "recall"), ("survivor-0-1", "recall")}
    assert all("stream" in r["reason"] for r in meta["refusals"])


def test_status_and_the_renderer_read_exactly_the_window_jobs_rows(jobs, capsys):
    tmp, window, _ = jobs
    results = f"paths.results={tmp}/raw"
    (view,) = status.sweep_jobs([results, *TOY])
    assert view.state.complete and view.shard.path == window
    assert len(view.rows()) == len(pd.read_parquet(window))
    assert status.main([results, *TOY]) == 0 and "done 4/4" in capsys.readouterr().out
    table1.main([*TOY, results, "--out", str(tmp / "t1")])
    md = (tmp / "t1.md").read_text()
    assert "| toy_window | GQA | 2 |" in md and "rows: 1 job(s)" in md
    capsys.readouterr()


def test_resume_computes_only_the_missing_item_probe_pairs(tmp_path, monkeypatch):
    calls: list[tuple[str, list[str]]] = []
    real = window_shape.evaluate_item

    def evaluate(bench, adapter, entry, arms, probes, cfg, keys):
        calls.append((entry.item_id, [s.label for s in arms]))
        if len(calls) == 2 and stop:
            raise KeyboardInterrupt  # killed while the second item is in flight
        return real(bench, adapter, entry, arms, probes, cfg, keys)

    monkeypatch.setattr(window_shape, "evaluate_item", evaluate)
    stop = True
    with pytest.raises(KeyboardInterrupt):
        runner.run(job_config(tmp_path, *TOY))
    (shard,) = shards(tmp_path / "raw", "table1_tiny")
    first = shard.rows()
    assert set(first["item_id"]) == {calls[0][0]}  # the finished item's rows, nothing of the one in flight
    stop, calls[:] = False, []
    runner.run(job_config(tmp_path, *TOY))
    assert [c[0] for c in calls] == sorted(
        {"recall-0-0", "recall-0-1", "survivor-0-0", "survivor-0-1"} - set(first["item_id"])
    )
    rows = shard.rows()
    assert not rows.duplicated(["item_id", "probe", "setting", "variant"]).any()
    pd.testing.assert_frame_equal(rows.iloc[: len(first)][list(first.columns)], first)  # stored rows untouched

    calls[:] = []  # a probe added to a complete job: only its (item, probe) pairs run
    runner.run(job_config(tmp_path, *TOY, "window_probes=[recall,survivor,leading]"))
    assert all(labels == ["leading"] for _, labels in calls) and len(calls) == 4
    assert set(shard.rows().query("probe == 'leading'")["item_id"]) == {"recall-0-0", "recall-0-1"}

    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a complete job loaded a model"))
    runner.run(job_config(tmp_path, *TOY, "window_probes=[leading,recall,survivor]"))


def test_an_item_that_cannot_be_built_fails_alone_and_the_job_says_so(tmp_path, monkeypatch):
    real = window_toy._toy_build

    def build(kind, i, seed, n_states, adapter):
        if (kind, i) == ("recall", 1):
            raise ValueError("a chunk is empty")
        return real(kind, i, seed, n_states, adapter)

    monkeypatch.setattr(window_toy, "_toy_build", build)
    runner.run(job_config(tmp_path, *TOY))  # a failed item is a recorded reason, as for arm jobs
    (shard,) = shards(tmp_path / "raw", "table1_tiny")
    assert shard.meta()["failed"] == {
        "recall-0-1": "window item recall-0-1 cannot be encoded by toy_window: a chunk is empty"
    }
    assert set(shard.rows()["item_id"]) == {"recall-0-0", "survivor-0-0", "survivor-0-1"}
    (view,) = status.sweep_jobs([f"paths.results={tmp_path}/raw", *TOY])
    assert "1 item(s) failed" in view.state.summary()


@pytest.fixture
def no_model(monkeypatch):
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


WINDOW = ("testbed=toy_window", "arms=[]", "window_probes=[recall]")
BAD = {
    (
        "testbed=toy_window",
        "window_probes=[recall]",
    ): (
        "arms=['reprefill', 'blind', 'patch_r16']: bench=window_toy is a window benchmark, its job runs window_probes; "
        "set arms=[]"
    ),
    ("window_probes=[recall]",): "window_probes=['recall']: only a window benchmark's job runs window probes",
    ("window_probes=recall",): "window_probes='recall': only a window benchmark's job runs window probes",
    (*WINDOW[:2], "window_probes=recall"): "window_probes must be a list, got 'recall'",
    ("testbed=toy_window", "arms=[]"): "window_probes=[]: a window job needs at least one window probe",
    (*WINDOW[:2], "window_probes=[recal]"): "unknown window_probe 'recal'; conf/window_probe has: deep_half,",
    (*WINDOW[:2], "window_probes=[{name:nope}]"): "unknown window probe 'nope'; registered window probes: deep_half,",
    (*WINDOW[:2], "window_probes=[{recall:{rank:-1}}]"): "recall: rank must be a non-negative int",
    (*WINDOW[:2], "window_probes=[recall,recall]"): "window_probes lists ['recall'] twice",
    (*WINDOW, "model=tiny_kimi"): "model=toy_window, not tiny_kimi",
    (*WINDOW, "bench.kwargs.n_states=9"): "bench.kwargs.n_states=9: must be null or an integer in 1..6",
    (*WINDOW, "+bench.kwargs.bogus=1"): "bench.kwargs ['bogus'] are not options of window_toy",
    (*WINDOW, "bench.subset=recal"): "window_toy: unknown subset(s) ['recal']",
    (*WINDOW, "canonical_context=native"): "a window job prefills its canonicals behind the prefix or alone",
    (*WINDOW, "window_keep_gb=-1"): "window_keep_gb=-1: must be a number >= 0",
    (
        "testbed=tiny_kimi_window",
        *WINDOW[1:],
        "bench.kwargs.window=0",
    ): "bench.kwargs.window=0: must be an integer >= 1",
    (
        "model=tiny_kimi",
        "bench=videomme_window",
        *WINDOW[1:],
        "bench.kwargs.frame_pixels=10",
    ): "bench.kwargs.frame_pixels=10: must be null (as decoded) or an integer >= 784",
}


@pytest.mark.parametrize("overrides", list(BAD), ids=lambda o: " ".join(o))
def test_preflight_catches_bad_window_jobs_before_any_model_loads(overrides, tmp_path, no_model):
    with pytest.raises(JobError) as err:
        runner.run(job_config(tmp_path, *overrides))
    assert BAD[overrides] in str(err.value), str(err.value)
    assert not (tmp_path / "raw").exists()


def test_video_segments_come_from_the_video_mme_loader_with_another_videos_segments_as_foreign(tmp_path, no_model):
    root = make_fixture("videomme", tmp_path / "data", n=3)
    cfg = job_config(
        tmp_path,
        "model=tiny_qwen2_5_vl",
        "bench=videomme_window",
        f"bench.root={root}",
        "bench.subset=short",
        *WINDOW[1:],
        "n_items=3",
    )
    assert job.preflight(cfg) == []
    chosen = job.select(cfg)
    assert chosen.files and len(chosen.items) == 3 and job.data_fingerprint(chosen)["files"]
    entry = chosen.items[0]
    item = entry.build(load_model("tiny_qwen2_5_vl"))
    assert item.n_history == 11 and len(item.foreign) == 4  # a segment: one clip of 2 frames, in time order
    assert all(len(c.parts) == 1 and isinstance(c.parts[0], Clip) and len(c.parts[0]) == 2 for c in item.chunks)
    times = [t for c in item.history for t in c.parts[0].timestamps]
    assert times == sorted(times) and len(set(times)) == 22
    assert item.meta["foreign_video"] != item.meta["video"] and item.window == 5
    assert max(f.size[0] * f.size[1] for c in item.chunks for f in c.parts[0].frames) <= 448 * 448


def test_paper_configs_preflight_names_only_missing_checkpoints_and_data(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KAMERA_MODELS", raising=False)
    monkeypatch.delenv("KAMERA_DATA", raising=False)
    allowed = ("no checkpoint path given and KAMERA_MODELS is not set", "no root= given and KAMERA_DATA is not set")
    for experiment in ("table1", "turnover", "table2", "appd", "appe"):
        assert sweep(["--check", f"experiment={experiment}"]) == 1
        problems = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("- ")]
        assert len(problems) == 4 and all(any(a in p for a in allowed) for p in problems), problems
    models = tmp_path / "models"  # checkpoints present (configs only: preflight reads no weights) and the data
    for repo in ("Qwen2.5-VL-7B-Instruct", "Qwen3-VL-8B-Instruct", "Kimi-VL-A3B-Instruct"):
        (models / repo).mkdir(parents=True)
        (models / repo / "config.json").write_text("{}")
    monkeypatch.setenv("KAMERA_MODELS", str(models))
    monkeypatch.setenv("KAMERA_DATA", str(make_fixture("videomme", tmp_path / "data", n=3).parent))
    assert sweep(["--check", "experiment=table1", "bench.subset=short"]) == 0  # Kimi-VL included: it has an adapter
    assert "preflight ok: 3 job(s)" in capsys.readouterr().out


def test_trimming_the_context_frees_views_and_a_later_probe_recomputes_the_same_rows():
    adapter = load_model("toy_window")
    item = window_item(adapter.task, "recall", 0)
    kept, trimmed = WindowContext(adapter, item), WindowContext(adapter, item)
    rows = {}
    for name, wctx in (("kept", kept), ("trimmed", trimmed)):
        before = adapter.forwards.copy()
        got = make_probe("recall").run(wctx)
        held = wctx.held_bytes()
        if name == "trimmed":
            assert wctx.trim(0) > 0 and 0 < wctx.held_bytes() < held  # the canonicals stay
        got += make_probe("forks").run(wctx)
        rows[name], spent = got, +(adapter.forwards - before)
        assert spent["full"] == (6 if name == "kept" else 12)  # forks re-ran the released recall windows
    assert trimmed.trim(10**12) == 0  # under budget: nothing released
    columns = ("probe", "setting", "variant", "kl", "eta", "forwards", "stored_forwards", "bytes")
    assert [tuple(r[c] for c in columns) for r in rows["kept"]] == [
        tuple(r[c] for c in columns) for r in rows["trimmed"]
    ]
