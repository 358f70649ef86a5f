"""Agent jobs through the real pipeline (issue 32): pools × policies replaying a trace → one row per (pool, policy,
step) in a shard, keyed, resumable and listed by status as every job; bad configs are one line before any weights
load; the renderer draws its table and figure from the stored rows."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments import agent as agent_render
from kamera.job import JobError
from kamera.run import runner
from kamera.sweep import compose_config, status

TOY = ("experiment=agent_tiny", "testbed=toy_window_recall", "trace=video", "n_items=2", "trace.knobs.steps=5")


def job_config(tmp_path, *overrides: str):
    return compose_config([f"paths.results={tmp_path}/raw", f"paths.outputs={tmp_path}/out", *overrides])


@pytest.fixture
def no_model(monkeypatch):
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


@pytest.fixture(scope="module")
def toy_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agent-job")
    return tmp, runner.run(job_config(tmp, *TOY))


def test_rows_per_pool_policy_step_keyed_as_every_job(toy_job):
    _, path = toy_job
    rows = pd.read_parquet(path)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert (rows["shape"] == "agent").all() and set(rows["trace"]) == {"video"}
    assert meta["identity"]["config"]["shape"] == "agent"
    assert meta["identity"]["config"]["trace"]["knobs"] == {
        "window": 4,
        "steps": 5,
        "reorder": 0.5,
        "lookback": 0.3,
    }
    assert set(rows["arm"]) == {
        "recompute",
        "prefix",
        "relocate",
        "kamera",
        "kamera_lazy",
        "kamera_never",
        "kamera_placement",
    }
    assert len(rows) == 2 * 5 * 7 and not rows.duplicated(["item_id", "arm", "step"]).any()
    ref = rows[rows["arm"] == "recompute"]
    assert (ref["kl"] == 0).all() and ref["agree"].all() and (ref["tokens"] == ref["n_window_tokens"]).all()
    # the trace differs across pools (seeded by the job's seed and the pool's id)
    assert rows[rows["arm"] == "recompute"].groupby("item_id")["window"].apply(tuple).nunique() == 2


def test_a_rerun_computes_nothing_and_status_lists_the_job(toy_job, capsys, no_model):
    tmp, path = toy_job
    before = path.stat().st_mtime_ns
    assert runner.run(job_config(tmp, *TOY)) == path and path.stat().st_mtime_ns == before
    (view,) = status.sweep_jobs([f"paths.results={tmp}/raw", *TOY])
    assert view.state.complete and view.shard.path == path
    assert status.main([f"paths.results={tmp}/raw", *TOY]) == 0 and "done 2/2" in capsys.readouterr().out


def test_another_trace_or_budget_is_another_job(tmp_path, no_model):
    from kamera.job import config_key

    base = config_key(job_config(tmp_path, *TOY))
    for extra in ("trace=web", "trace.budget=2", "trace.eviction=cost", "trace.knobs.lookback=0.5"):
        assert config_key(job_config(tmp_path, *TOY, extra)) != base, extra


def test_the_renderer_draws_table_and_figure(toy_job, capsys):
    tmp, _ = toy_job
    agent_render.main([*TOY, f"paths.results={tmp}/raw", "--out", str(tmp / "agent")])
    md = (tmp / "agent.md").read_text()
    assert "| toy_window | video | recompute | " in md and "placement − kamera: tokens per trace" in md
    assert (tmp / "agent_figure.pdf").read_bytes().startswith(b"%PDF") and (tmp / "agent_figure.png").exists()


def test_a_jsonl_trace_replays(tmp_path):
    trace = tmp_path / "mine.jsonl"
    trace.write_text(
        '{"window": [0, 1, 2]}\n{"window": [0, 2, 1]}\n{"window": [0, 1, 2]}\n', encoding="utf-8"
    )
    path = runner.run(job_config(tmp_path, *TOY, "n_items=1", f"trace.path={trace}"))
    rows = pd.read_parquet(path)
    assert set(rows["trace"]) == {"jsonl"} and sorted(set(rows["step"])) == [0, 1, 2]
    assert json.loads(path.with_suffix(".json").read_text())["identity"]["config"]["trace"]["kind"] == "jsonl"


AGENT = ("experiment=agent_tiny", "testbed=toy_window_recall")
BAD = {
    (*AGENT, "trace=web", "trace.knobs.window=0"): "trace.window=0: must be an integer in 1..11",
    (*AGENT, "trace=web", "trace.knobs.lookback=2"): "trace.lookback=2: a rate in [0, 1]",
    (
        *AGENT,
        "trace=web",
        "+trace.knobs.reorder=0.5",
    ): "trace.kind=web: web() got an unexpected keyword argument",
    (*AGENT, "trace=web", "trace.kind=chat"): "trace.kind='chat': one of ['doc', 'video', 'web']",
    (*AGENT, "trace=web", "trace.budget=0"): "trace.budget=0: store capacity in chunk pages, a number > 0",
    (*AGENT, "trace=web", "trace.eviction=fifo"): "trace.eviction='fifo': one of ['lru', 'cost']",
    (*AGENT, "trace=web", "trace.cost_model=gpt5"): "trace.cost_model='gpt5':",
    (*AGENT, "trace=web", "trace.path=/nonexistent.jsonl"): "trace.path='/nonexistent.jsonl': no such file",
    (*AGENT, "trace=web", "policies=[kamera_x]"): "unknown policy 'kamera_x'; conf/policy has:",
    (
        *AGENT,
        "trace=web",
        "policies=[{kamera:{cascade:often}}]",
    ): "kamera: cascade='often': one of ['eager', 'lazy', 'never']",
    (
        *AGENT,
        "trace=web",
        "window_probes=[recall]",
    ): "window_probes=['recall']: an agent job (policies=[…]) runs policies only",
    AGENT: "trace=null: an agent job replays a trace",
    (
        "experiment=agent_tiny",
        "trace=web",
        "testbed=tiny_llava",
        "bench=synthetic",
    ): "an agent job replays traces over a window benchmark's items",
}


@pytest.mark.parametrize("overrides", list(BAD), ids=lambda o: " ".join(o[2:]))
def test_preflight_catches_bad_agent_jobs_before_any_model_loads(overrides, tmp_path, no_model):
    with pytest.raises(JobError) as err:
        runner.run(job_config(tmp_path, *overrides))
    assert BAD[overrides] in str(err.value), str(err.value)
    assert not (tmp_path / "raw").exists()


def test_a_malformed_jsonl_line_is_one_line_before_weights(tmp_path, no_model):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"window": [0, 1]}\n{"window": [0, 99]}\n', encoding="utf-8")
    with pytest.raises(JobError) as err:
        runner.run(job_config(tmp_path, *AGENT, "trace=web", f"trace.path={trace}"))
    assert f"{trace}:2: chunk id(s) [99] out of range: the pool holds chunks 0..10" in str(err.value)


class Killed(BaseException):
    """Death between two pools (kill -9 leaves exactly this: the first pool's rows written, nothing else)."""


def test_a_job_killed_between_pools_resumes_with_the_rest(tmp_path, monkeypatch, caplog):
    from kamera.job.store import Shard

    append, calls = Shard.append, []

    def dies_at_the_second_pool(self, name, records, replace=()):
        if name == "rows":
            calls.append(1)
            if len(calls) == 2:
                raise Killed
        return append(self, name, records, replace)

    monkeypatch.setattr(Shard, "append", dies_at_the_second_pool)
    with pytest.raises(Killed):
        runner.run(job_config(tmp_path, *TOY))
    monkeypatch.setattr(Shard, "append", append)
    (view,) = status.sweep_jobs([f"paths.results={tmp_path}/raw", *TOY])
    assert view.state.status == "partial" and view.state.k == 1
    first = view.rows()
    with caplog.at_level("INFO", logger="kamera.run"):
        path = runner.run(job_config(tmp_path, *TOY))
    assert "2 items selected, 1 with arms or probes to run" in caplog.text
    rows = pd.read_parquet(path)
    assert len(rows) == 2 * 5 * 7 and not rows.duplicated(["item_id", "arm", "step"]).any()
    again = rows[rows["item_id"].isin(first["item_id"])].sort_values(["arm", "step"]).reset_index(drop=True)
    cols = ["arm", "step", "tokens", "kl", "agree"]
    assert again[cols].equals(first.sort_values(["arm", "step"]).reset_index(drop=True)[cols])


@pytest.mark.integration
def test_resume_after_kill_9(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    args = [
        sys.executable,
        "-m",
        "kamera.run",
        *TOY,
        "n_items=4",
        f"paths.results={tmp_path}/raw",
        f"paths.outputs={tmp_path}/out",
    ]
    proc = subprocess.Popen(
        args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    shard_dir, deadline = tmp_path / "raw" / "agent_tiny", time.time() + 240
    while time.time() < deadline and not list(shard_dir.glob("*[0-9a-f].parquet")):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    (shard,) = shard_dir.glob("*[0-9a-f].parquet")
    k = pd.read_parquet(shard)["item_id"].nunique()
    assert 0 < k < 4
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = pd.read_parquet(shard)
    assert rows["item_id"].nunique() == 4 and not rows.duplicated(["item_id", "arm", "step"]).any()
