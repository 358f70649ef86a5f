"""Fig. 12's engine rows as keyed shards, without an engine: resume after kill -9, partial and truncated records,
no duplicates, recompute on new weights or a new code version, one run per folder, the renderer's refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import save_file

from experiments.fig12 import engine_panels, engine_provenance
from kamera.engine import rows as er
from kamera.engine.rows import TIMING, EngineRowsError, Job, check_view, folder_lock, plan, run_jobs

ARMS = ("reprefill", "blind")
ITEMS = [{"item_id": f"r{i:03d}", "A": [i, i + 1], "gold": i % 4, "seed": 0} for i in range(5)]


def checkpoint(root: Path, seed: int) -> Path:
    """A save_pretrained-like folder: config.json and one weight file of fixed shapes, values by ``seed``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 4}))
    save_file({"w": torch.randn(4, 4, generator=torch.Generator().manual_seed(seed))}, str(root / "model.safetensors"))
    return root


class Fake:
    """A measurer that records which (job, item) it computed; rows carry a value so a reuse would show."""

    def __init__(self, value: float = 1.0) -> None:
        self.calls: list[tuple[str, str]] = []
        self.value = value

    def __call__(self, job: Job, todo: list[dict]):
        for item in todo:
            self.calls.append((str(job), item["item_id"]))
            rows = [{"source": job.source, "model": job.model, "dtype": job.dtype, "item_id": item["item_id"],
                     "arm": arm, "kl": self.value} for arm in ARMS]
            timing = [{"source": "vllm", "model": job.model, "dtype": job.dtype, "item_id": item["item_id"],
                       "ttft_prefill_s": self.value}] if job.source == "vllm" else []
            yield item["item_id"], rows, timing


@pytest.fixture
def jobs(tmp_path) -> list[Job]:
    ckpt = checkpoint(tmp_path / "ckpt", 0)
    return [Job(source, "tiny", ckpt, "float32") for source in er.SOURCES]


def run(out: Path, jobs: list[Job], fake: Fake) -> pd.DataFrame:
    run_jobs(out, jobs, ITEMS, 0, ARMS, fake)
    return pd.read_csv(out / "rows.csv")


def shard_of(out: Path, jobs: list[Job], source: str):
    return next(p.shard for p in plan(out, jobs, ITEMS, 0, ARMS) if p.job.source == source)


def test_a_rerun_computes_nothing_and_the_view_holds_each_row_once(tmp_path, jobs):
    out, first = tmp_path / "out", Fake()
    rows = run(out, jobs, first)
    assert len(first.calls) == len(jobs) * len(ITEMS)
    assert len(rows) == len(jobs) * len(ITEMS) * len(ARMS) and not rows.duplicated(["job_key", "item_id", "arm"]).any()
    assert set(rows["version"]) == {er.VERSION} and rows["job_key"].nunique() == len(jobs)
    again = Fake()
    assert run(out, jobs, again).equals(rows) and again.calls == []
    timing = pd.read_csv(out / "timing.csv")
    assert len(timing) == len(ITEMS) and set(timing["probe"]) == {TIMING}
    from kamera.job.store import code_version

    commit = code_version()["commit"]
    assert [c["commit"] for c in json.loads((out / "meta.json").read_text())["commits"]] == [commit]
    assert f"commit {commit[:10]}" in engine_provenance(out)  # the engine figure names its code commit
    assert all(p.state.complete for p in plan(out, jobs, ITEMS, 0, ARMS))


def test_kill_9_mid_run_keeps_the_finished_items_and_the_rerun_does_only_the_rest(tmp_path, jobs):
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_rows import ARMS, ITEMS, Fake, Job
        from kamera.engine.rows import run_jobs
        fake = Fake()
        def dying(job, todo):
            for n, got in enumerate(fake(job, todo)):
                if job.source == "vllm" and n == 2:
                    os.kill(os.getpid(), signal.SIGKILL)  # item r002 of the vLLM job in flight
                yield got
        jobs = [Job(s, "tiny", Path({str(jobs[0].checkpoint)!r}), "float32") for s in ("own", "vllm")]
        run_jobs(Path({str(out)!r}), jobs, ITEMS, 0, ARMS, dying)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not (out / "rows.csv").exists()  # no view of an unfinished run
    vllm = shard_of(out, jobs, "vllm")
    assert sorted(vllm.rows()["item_id"].unique()) == ["r000", "r001"]
    fake = Fake()
    rows = run(out, jobs, fake)
    assert fake.calls == [("vllm tiny float32", i["item_id"]) for i in ITEMS[2:]]
    assert len(rows) == len(jobs) * len(ITEMS) * len(ARMS) and not rows.duplicated(["job_key", "item_id", "arm"]).any()
    assert sorted(rows.loc[rows["source"] == "vllm", "run_index"].unique()) == [0, 1]


def test_an_item_cut_between_its_two_writes_is_redone_not_read_nor_duplicated(tmp_path, jobs):
    out = tmp_path / "out"
    run(out, jobs, Fake())
    vllm = shard_of(out, jobs, "vllm")
    rows = vllm.rows()
    vllm.append("rows", [], replace={("r003", arm, "") for arm in ARMS})  # r003's timing stored, its rows not
    assert len(vllm.rows()) == len(rows) - len(ARMS) and (vllm.probes()["item_id"] == "r003").sum() == 1
    fake = Fake(2.0)
    view = run(out, jobs, fake)
    assert fake.calls == [("vllm tiny float32", "r003")]
    assert (pd.read_csv(out / "timing.csv")["item_id"] == "r003").sum() == 1
    redone = view[(view["source"] == "vllm") & (view["item_id"] == "r003")]
    assert len(redone) == len(ARMS) and set(redone["kl"]) == {2.0}


def test_a_truncated_shard_file_is_set_aside_and_its_items_recomputed(tmp_path, jobs, caplog):
    out = tmp_path / "out"
    run(out, jobs, Fake())
    own = shard_of(out, jobs, "own")
    blob = own.path.read_bytes()
    own.path.write_bytes(blob[: len(blob) // 2])
    fake = Fake()
    rows = run(out, jobs, fake)
    assert fake.calls == [("own tiny float32", i["item_id"]) for i in ITEMS]
    assert len(list(own.dir.glob(f"{own.path.name}.bad-*"))) == 1 and "does not read back" in caplog.text
    assert len(rows) == len(jobs) * len(ITEMS) * len(ARMS)


def test_new_weights_of_the_same_shapes_are_another_job(tmp_path, jobs):
    out = tmp_path / "out"
    old = run(out, jobs, Fake(1.0))
    time.sleep(0.01)  # a new mtime: the weights' digest cache is keyed by size, mtime and inode
    checkpoint(jobs[0].checkpoint, 1)
    fake = Fake(3.0)
    new = run(out, jobs, fake)
    assert len(fake.calls) == len(jobs) * len(ITEMS)
    assert set(new["kl"]) == {3.0} and not set(new["job_key"]) & set(old["job_key"])
    assert new["checkpoint"].nunique() == 1 and new["checkpoint"].iloc[0] != old["checkpoint"].iloc[0]


def test_a_new_code_version_recomputes_every_item_in_place(tmp_path, jobs, monkeypatch):
    out = tmp_path / "out"
    old = run(out, jobs, Fake(1.0))
    monkeypatch.setattr(er, "VERSION", er.VERSION + 1)
    fake = Fake(4.0)
    new = run(out, jobs, fake)
    assert len(fake.calls) == len(jobs) * len(ITEMS)
    assert set(new["version"]) == {er.VERSION} and set(new["kl"]) == {4.0}
    assert set(new["job_key"]) == set(old["job_key"])  # the same shards, their stale records replaced
    assert len(shard_of(out, jobs, "own").rows()) == len(ITEMS) * len(ARMS)


def test_a_second_run_on_the_same_folder_is_refused_with_one_line(tmp_path, jobs):
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from kamera.engine.rows import folder_lock
        with folder_lock(Path({str(out)!r})):
            print("held", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert holder.stdout.readline().strip() == "held"
        fake = Fake()
        with pytest.raises(EngineRowsError, match=r"being written by another engine run \(pid \d+") as err:
            run_jobs(out, jobs, ITEMS, 0, ARMS, fake)
        assert "\n" not in str(err.value) and fake.calls == []
    finally:
        holder.kill()
        holder.wait()
    with folder_lock(out), folder_lock(out):  # re-entrant within one process; free once the holder died
        pass
    assert len(run(out, jobs, Fake())) == len(jobs) * len(ITEMS) * len(ARMS)


def test_the_renderer_refuses_a_folder_that_mixes_versions_or_checkpoints(tmp_path, jobs):
    out = tmp_path / "out"
    run(out, jobs, Fake())
    rows = pd.read_csv(out / "rows.csv")
    timing = pd.read_csv(out / "timing.csv")
    check_view(rows, timing)
    bumped = rows.copy()
    bumped.loc[0, "version"] = er.VERSION + 1
    with pytest.raises(EngineRowsError, match="several engine code versions"):
        check_view(bumped, timing)
    other = rows.copy()
    other.loc[0, "checkpoint"] = "checkpoint:0000000000000000"
    with pytest.raises(EngineRowsError, match="several checkpoints of tiny"):
        check_view(other, timing)
    with pytest.raises(EngineRowsError, match="duplicate rows"):
        check_view(pd.concat([rows, rows.iloc[:1]]), timing)
    with pytest.raises(EngineRowsError, match="several engine library versions"):
        check_view(rows, timing.assign(libraries="vllm 0.0"))
    rows.drop(columns=["job_key"]).to_csv(out / "rows.csv", index=False)
    with pytest.raises(SystemExit, match=r"refusing to render: engine rows .*rows.csv has no job_key column"):
        engine_panels(out)
    with pytest.raises(SystemExit, match="refusing to render"):
        engine_provenance(out)


def test_make_status_lists_the_engines_jobs_done_and_partial(tmp_path, jobs):
    from kamera.sweep.status import engine_lines

    out = tmp_path / "engine" / "fig12_tiny"
    run(out, jobs, Fake())

    def dying(job, todo):  # a second checkpoint's jobs, cut after two items
        for k, got in enumerate(Fake()(job, todo)):
            if k == 2:
                raise KeyboardInterrupt
            yield got

    other = [Job(j.source, "other", checkpoint(tmp_path / "ckpt2", 1), j.dtype) for j in jobs]
    with pytest.raises(KeyboardInterrupt):
        run_jobs(out, other, ITEMS, 0, ARMS, dying)
    lines = engine_lines(tmp_path)
    assert sum("done 5/5" in x for x in lines) == 2 and any("partial 2/5" in x and " own other float32" in x for x in lines)
    assert all(str(out / "shards") in x for x in lines)
