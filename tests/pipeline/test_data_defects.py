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


def test_partial_data_is_not_complete_and_the_repaired_data_is_a_new_job(tmp_path, capsys):
    root = make_fixture("mm_niah", tmp_path / "data", n=3)
    item, image = last_selected_needle(root)
    good = image.read_bytes()
    image.write_bytes(good[: len(good) // 2])  # a corrupt medium preflight's sample does not reach
    overrides = (*NIAH, f"bench.root={root}")
    with pytest.raises(JobError) as err:
        runner.run(job_config(tmp_path, *overrides))
    assert "incomplete: failed 2/2" in str(err.value) and item in str(err.value) and "data defect" in str(err.value)
    (shard,) = shards(tmp_path / "raw", "adhoc")
    assert len(shard.rows()) == 2  # the loadable items' rows are kept
    defects = shard.meta()["selection"]["skipped"]
    assert [(d["item_id"], d["stage"]) for d in defects] == [(item, "build")] and "blink" in defects[0]["reason"]

    views = status.sweep_jobs([f"paths.results={tmp_path}/raw", *overrides])
    lines = "\n".join(status.report(views))
    assert "failed 2/2" in lines and "(2 of the 3 items requested could be selected)" in lines and item in lines

    render = ["~experiment", *overrides, f"paths.results={tmp_path}/raw", "--out", str(tmp_path / "t")]
    with pytest.raises(SystemExit, match=r"1 of 1 job\(s\) incomplete[\s\S]*failed 2/2"):
        table3.main(render)
    table3.main([*render, "--allow-partial"])
    md = (tmp_path / "t.md").read_text()
    assert "(adhoc, partial)" in md and "_PARTIAL (1 incomplete job(s))" in md and "0.50 / 2" in md

    image.write_bytes(good)  # the repair changes the selection: a new job, never a mix with the old rows
    path = runner.run(job_config(tmp_path, *overrides))
    assert len(pd.read_parquet(path)) == 3 and len(shards(tmp_path / "raw", "adhoc")) == 2
    table3.main(render)
    assert "0.50 / 3" in (tmp_path / "t.md").read_text()
    lines = "\n".join(status.report(status.sweep_jobs([f"paths.results={tmp_path}/raw", *overrides])))
    assert "done 3/3" in lines and "superseded" in lines
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
