"""Complete means complete (issue 9, failures 3 and 6).

Failure 3: with rows that fail to load, a job ran with fewer or substitute items, exited 0 and was
marked complete; a repaired copy kept the old items; zero usable items exited 0 with no shard.
Failure 6: a truncated complete shard read as "nothing to run"; a corrupt partial one was a traceback.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from pipeline_support import job_config

from experiments import table3
from kamera.data import make_fixture
from kamera.data.selection import selection_order
from kamera.job import JobError
from kamera.job.store import ShardCorruptError, shards
from kamera.models import load_model
from kamera.run import runner
from kamera.sweep import status

NIAH = ("bench=mm_niah_reasoning", "arms=[blind]", "n_items=3")


def last_selected_needle(root) -> tuple[str, object]:
    """The item selected last (after preflight's sample of 2) and the needle image only it holds."""
    ids = [f"mm_niah/reasoning-image/val/{i}" for i in range(3)]
    last = selection_order(ids, seed=0)[-1]
    return last, root / "mm_niah_val" / "images" / "needles" / f"blink-{last.rsplit('/', 1)[1]}-b.png"


def test_a_data_defect_beyond_preflights_sample_stops_the_job_at_selection(tmp_path, monkeypatch, capsys):
    """Issue 19 item 10: a medium preflight's sample does not reach fails the job when the items are selected, one
    line naming the item and its reason, before any weights load and with nothing written; the repaired data runs."""
    root = make_fixture("mm_niah", tmp_path / "data", n=3)
    item, image = last_selected_needle(root)
    good = image.read_bytes()
    image.write_bytes(good[: len(good) // 2])  # a corrupt medium preflight's sample does not reach
    overrides = (*NIAH, f"bench.root={root}")
    assert runner.preflight(job_config(tmp_path, *overrides)) == []  # preflight's sample is clean
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("weights loaded for a defective selection"))
    with pytest.raises(JobError) as err:
        runner.run(job_config(tmp_path, *overrides))
    lines = str(err.value).splitlines()
    assert lines[0].startswith("cannot start this job: the data has defects") and len(lines) == 2
    assert lines[1].startswith(f"- mm_niah: data defect, {item} (build): ") and "blink" in lines[1]
    assert not (tmp_path / "raw").exists()  # no shard, no lock, no rows
    views = status.sweep_jobs([f"paths.results={tmp_path}/raw", *overrides])
    assert [v.state.status for v in views] == ["missing"]

    monkeypatch.undo()
    image.write_bytes(good)
    path = runner.run(job_config(tmp_path, *overrides))
    assert len(pd.read_parquet(path)) == 3 and len(shards(tmp_path / "raw", "adhoc")) == 1
    render = ["~experiment", *overrides, f"paths.results={tmp_path}/raw", "--out", str(tmp_path / "t")]
    table3.main(render)
    assert "0.50 / 3" in (tmp_path / "t.md").read_text()
    capsys.readouterr()


def test_zero_usable_items_fail_the_job_with_the_reasons(tmp_path, monkeypatch):
    """A model that cannot take any item (a context of 8 positions): each item is recorded as failed with
    the reason, the job fails naming them, and the shard says so."""

    def short_context(*args, **kwargs):
        adapter = load_model(*args, **kwargs)
        adapter.text_config.max_position_embeddings = 8
        return adapter

    monkeypatch.setattr(runner, "load_model", short_context)
    cfg = job_config(tmp_path, "model=tiny_llava", "arms=[blind]", "n_items=2")
    with pytest.raises(JobError, match=r"failed 2/2, 2 item\(s\) failed, no usable item[\s\S]*positions"):
        runner.run(cfg)
    (shard,) = shards(tmp_path / "raw", "adhoc")
    failed = shard.meta()["failed"]
    assert len(failed) == 2 and all("context of 8" in r for r in failed.values()) and shard.rows().empty
    with pytest.raises(JobError, match="no usable item"):  # a rerun reports it again; it loads no model
        monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("model loaded"))
        runner.run(cfg)


def test_non_finite_logits_fail_the_item_naming_the_comparison_never_a_perfect_score(tmp_path, monkeypatch):
    """A model whose head yields NaN: KL raises instead of scoring 0 (η = 1), the runner records each item as
    failed with that reason, writes no row for it, and the job fails (issue 14: no NaN scored as perfect)."""

    def broken_head(*args, **kwargs):
        adapter = load_model(*args, **kwargs)
        with torch.no_grad():
            adapter.model.lm_head.weight[0, 0] = float("nan")
        return adapter

    monkeypatch.setattr(runner, "load_model", broken_head)
    with pytest.raises(JobError, match="no usable item"):
        runner.run(job_config(tmp_path, "model=tiny_llava", "arms=[blind]", "n_items=2"))
    (shard,) = shards(tmp_path / "raw", "adhoc")
    failed = shard.meta()["failed"]
    assert len(failed) == 2 and all("non-finite" in r for r in failed.values()), failed
    assert shard.rows().empty


def test_a_corrupt_shard_is_reported_with_its_path_and_what_to_do(tmp_path, capsys):
    overrides = ("model=tiny_llava", "arms=[blind]", "n_items=1")
    path = runner.run(job_config(tmp_path, *overrides))
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # a truncated complete shard
    with pytest.raises(ShardCorruptError, match=rf"{path} does not read back[\s\S]*mv {path} {path}.bad"):
        runner.run(job_config(tmp_path, *overrides))
    lines = "\n".join(status.report(status.sweep_jobs([f"paths.results={tmp_path}/raw", *overrides])))
    assert "corrupt" in lines and f"mv {path}" in lines
    with pytest.raises(SystemExit, match="corrupt"):
        table3.main(["~experiment", *overrides, f"paths.results={tmp_path}/raw"])

    path.write_bytes(good)
    meta = path.with_suffix(".json")
    meta.write_text(meta.read_text()[:40])  # a truncated json (e.g. a partial copy)
    with pytest.raises(ShardCorruptError, match=rf"{meta} does not read back.*delete it"):
        runner.run(job_config(tmp_path, *overrides))
    meta.unlink()  # what the message says: the next run rewrites it and keeps the rows
    runner.run(job_config(tmp_path, *overrides))
    assert len(pd.read_parquet(path)) == 1 and json.loads(meta.read_text())["selection"]["item_ids"]
    capsys.readouterr()
