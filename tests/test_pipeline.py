"""The experiment pipeline: config composition, hashing, the results store, resume, sweeps, renderers."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from experiments import fig5, table3
from kamera import runner
from kamera.store import Shard, config_hash, load_rows
from kamera.sweep import CONF_DIR, compose_config, expand

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def job_config(tmp_path: Path, *overrides: str):
    return compose_config([f"paths.results={tmp_path}/raw", f"paths.outputs={tmp_path}/out", *overrides])


def cli(tmp_path: Path, *overrides: str, multirun: bool = False, **popen) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "kamera.run", *(["-m"] if multirun else []),
           f"paths.results={tmp_path}/raw", f"paths.outputs={tmp_path}/out", *overrides]
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def finish(proc: subprocess.Popen, timeout: int = 300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


# ----- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_its_arms_resolve(experiment, tmp_path):
    jobs = expand([f"experiment={experiment}"])
    assert len(jobs) >= 2
    for job in jobs:
        cfg = job_config(tmp_path, *job)
        assert cfg.group == experiment
        rc = runner.result_config(cfg)  # builds every arm from its conf/arm file
        assert [a["label"] for a in rc["arms"]] == list(cfg.arms)
        if experiment.endswith("_tiny"):
            assert runner.preflight(cfg) == []


def test_every_arm_file_builds_its_arm():
    specs = runner.arm_specs(runner.arm_names())
    assert {"reprefill", "blind", "oracle4d", "patch_r16", "patch_full"} <= {s.label for s in specs}


def test_hash_ignores_operational_keys_and_follows_result_keys(tmp_path):
    base = config_hash(runner.result_config(job_config(tmp_path)))
    for op in ("device=cuda", "paths.results=/elsewhere", "tracking=offline", "model.attn_implementation=eager",
               "progress_every_s=1", "group=other", "launcher=submitit_local", "threads=2"):
        assert config_hash(runner.result_config(job_config(tmp_path, op))) == base, op
    for res in ("model=tiny_kimi", "model.dtype=bfloat16", "n_items=9", "seed=1", "arms=[blind,patch_r8]",
                "bench.kwargs.n_a_chunks=3", "canonical_context=none", "eta_floor=1e-3"):
        assert config_hash(runner.result_config(job_config(tmp_path, res))) != base, res


def test_hash_follows_an_arm_files_knobs(tmp_path, monkeypatch):
    arm_dir = tmp_path / "conf" / "arm"
    arm_dir.mkdir(parents=True)
    for p in (CONF_DIR / "arm").glob("*.yaml"):
        (arm_dir / p.name).write_text(p.read_text())
    monkeypatch.setattr(runner, "CONF_DIR", tmp_path / "conf")
    cfg = job_config(tmp_path)
    before = config_hash(runner.result_config(cfg))
    (arm_dir / "patch_r16.yaml").write_text("name: patch\nrank: 17\n")
    assert config_hash(runner.result_config(cfg)) != before


def test_bad_names_and_missing_paths_fail_before_any_forward(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.delenv("KAMERA_DATA", raising=False)
    monkeypatch.delenv("KAMERA_MODELS", raising=False)
    cases = {
        "arms=[blind,patch_r999]": "conf/arm has: blind",
        "model.name=qwen9": "registered models: tiny_qwen2_5_vl",
        "bench.name=nope": "valid names: ['egoschema'",
        "bench=mm_niah_reasoning": "KAMERA_DATA is not set",
        "model=qwen2_5_vl_7b": "hf download Qwen/Qwen2.5-VL-7B-Instruct",
    }
    for override, message in cases.items():
        with pytest.raises(SystemExit) as err:
            runner.run(job_config(tmp_path, override))
        assert message in str(err.value), (override, str(err.value))


def test_sweep_preflight_lists_every_missing_path(monkeypatch, capsys):
    from kamera.sweep import main

    monkeypatch.delenv("KAMERA_DATA", raising=False)
    monkeypatch.setenv("KAMERA_MODELS", "/nonexistent/models")
    assert main(["--check", "experiment=table3"]) == 1
    err = capsys.readouterr().err
    assert "/nonexistent/models/Qwen2.5-VL-7B-Instruct" in err and "/nonexistent/models/Kimi-VL-A3B-Instruct" in err
    assert "MM-NIAH" in err


# ----- the store -----------------------------------------------------------------------------------
def test_shard_writes_whole_items_atomically(tmp_path, monkeypatch):
    shard = Shard(tmp_path, "g", "abc")
    shard.append([{"item_id": "a", "arm": "x", "kl": 1.0}, {"item_id": "a", "arm": "y", "kl": 2.0}])
    with pytest.raises(ValueError, match="duplicate"):
        shard.append([{"item_id": "a", "arm": "z", "kl": 3.0}])

    def crash(self, path, **kw):  # a kill mid-write leaves a partial temp file, never a partial shard
        Path(path).write_bytes(b"PAR1 half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", crash)
    with pytest.raises(KeyboardInterrupt):
        shard.append([{"item_id": "b", "arm": "x", "kl": 0.5}])
    monkeypatch.undo()
    assert list(shard.read()["item_id"]) == ["a", "a"]
    assert (tmp_path / "g" / ".abc.parquet.tmp").exists() and len(load_rows(tmp_path)) == 2


def test_a_second_job_on_the_same_shard_fails_fast(tmp_path):
    from kamera.store import ShardLockedError

    shard = Shard(tmp_path, "g", "abc")
    with shard.locked(), pytest.raises(ShardLockedError, match="another job"), Shard(tmp_path, "g", "abc").locked():
        pass


# ----- jobs end to end -----------------------------------------------------------------------------
ARMS3 = "arms=[reprefill,blind,patch_r8]"


def test_job_rows_metrics_and_skip_on_rerun(tmp_path, caplog):
    cfg = job_config(tmp_path, "model=tiny_llava", ARMS3, "n_items=2")
    path = runner.run(cfg)
    rows = pd.read_parquet(path)
    assert len(rows) == 6 and rows.groupby(["item_id", "arm"]).size().max() == 1
    ref = rows[rows["arm"] == "reprefill"]
    assert (ref["kl"] == 0).all() and (ref["eta"] == 1).all()
    blind = rows[rows["arm"] == "blind"]
    assert (blind["kl"] == blind["kl_blind"]).all() and (blind["bytes"] == 0).all()
    patch = rows[rows["arm"] == "patch_r8"]
    assert (patch["rank"] == 8).all() and (patch["eta"] > 0.9).all() and (patch["bytes_frac"] > 0).all()
    assert set(rows["pred"]) <= set("ABCD") and rows["correct"].isin([0.0, 1.0]).all()
    with caplog.at_level("INFO", logger="kamera.run"):
        assert runner.run(cfg) == path
    assert "nothing to run" in caplog.text
    assert len(pd.read_parquet(path)) == 6


def test_open_answer_items_are_greedy_decoded_and_scored(tmp_path):
    from kamera.data import make_fixture

    root = make_fixture("musique", tmp_path / "data", n=2)
    rows = pd.read_parquet(runner.run(job_config(
        tmp_path, "testbed=tiny_deepseek_v2", f"bench.root={root}", "arms=[reprefill,blind]", "n_items=2",
        "max_new_tokens=3",
    )))
    assert len(rows) == 4 and rows["correct"].between(0, 1).all() and (rows["n_choices"] == 0).all()


def test_resume_after_kill_loses_nothing_and_duplicates_nothing(tmp_path):
    overrides = ("model=tiny_qwen2_5_vl", ARMS3, "n_items=6")
    proc = cli(tmp_path, *overrides, start_new_session=True)
    shard_dir = tmp_path / "raw" / "adhoc"
    deadline = time.time() + 240
    while time.time() < deadline and not list(shard_dir.glob("*.parquet")):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9 mid-sweep
    proc.communicate()
    partial = load_rows(tmp_path / "raw")
    assert 0 < partial["item_id"].nunique() < 6
    out = finish(cli(tmp_path, *overrides))
    assert f"{partial['item_id'].nunique()} already in the shard" in out
    rows = load_rows(tmp_path / "raw")
    assert len(rows) == 18 and rows["item_id"].nunique() == 6
    assert rows.groupby(["item_id", "arm"]).size().eq(1).all()


def test_multirun_with_the_local_submitit_launcher(tmp_path):
    out = finish(cli(tmp_path, "testbed=tiny_qwen2_5_vl,tiny_kimi", ARMS3, "n_items=2", "launcher=submitit_local",
                     multirun=True))
    rows = load_rows(tmp_path / "raw")
    assert len(rows) == 2 * 2 * 3, out[-2000:]
    assert set(rows["model"]) == {"tiny_qwen2_5_vl", "tiny_kimi"} and rows["config_hash"].nunique() == 2


# ----- renderers on a fixed rows frame -------------------------------------------------------------
def fixed_rows() -> pd.DataFrame:
    """A deterministic rows frame: 2 models × 1 subset × 4 arms × 6 items, plus a rank sweep."""
    rows = []
    for mi, model in enumerate(["qwen2_5_vl_7b", "tiny_kimi"]):
        for i in range(6):
            for ai, arm in enumerate(["reprefill", "blind", "patch_r16", "patch_r64", "patch_r1", "patch_full"]):
                rank = {"patch_r16": 16, "patch_r64": 64, "patch_r1": 1}.get(arm, math.nan)
                kl = 0.0 if arm in ("reprefill", "patch_full") else 0.5 / (1 + ai) / (1 + mi)
                rows.append({
                    "model": model, "subset": "reasoning-image", "arm": arm, "item_id": f"i{i}", "n_choices": 2,
                    "correct": float((i * (ai + 1) + mi) % 4 != 0), "kl": kl + 1e-6 * i, "rank": rank,
                    "arm_name": "blind" if arm == "blind" else ("reprefill" if arm == "reprefill" else "patch"),
                    "params": '{"granularity": "layer", "layers": "all"}',
                })
    return pd.DataFrame(rows)


def test_table3_renders_the_golden_markdown_and_latex(tmp_path):
    md, paths = table3.render(fixed_rows(), "golden", tmp_path / "table3")
    assert md == (GOLDEN / "table3.md").read_text()
    assert paths[1].read_text() == (GOLDEN / "table3.tex").read_text()
    assert "(paper 0.59)" in md  # the paper's value sits beside ours at paper scale


def test_fig5_renders_byte_identical_files_and_the_golden_curve(tmp_path):
    md, paths = fig5.render(fixed_rows(), "golden", tmp_path / "a")
    _, again = fig5.render(fixed_rows(), "golden", tmp_path / "b")
    assert md == (GOLDEN / "fig5.md").read_text()
    for p, q in zip(paths, again, strict=True):
        assert p.read_bytes() == q.read_bytes(), p.suffix
    assert paths[0].read_bytes().startswith(b"%PDF") and b"CreationDate" not in paths[0].read_bytes()


def test_an_arm_that_refuses_the_family_is_skipped_with_its_reason(tmp_path):
    import json

    path = runner.run(job_config(tmp_path, "model=tiny_kimi", "arms=[blind,shadowkv_r16]", "n_items=1"))
    assert set(pd.read_parquet(path)["arm"]) == {"blind"}
    refusals = json.loads(path.with_suffix(".json").read_text())["complete"]["refusals"]
    assert refusals[0]["arm"] == "shadowkv_r16" and "MLA" in refusals[0]["reason"]


def test_hash_follows_shipped_weights(tmp_path):
    from kamera.models.registry import weights_fingerprint

    image, text = weights_fingerprint("toy_binding"), weights_fingerprint("toy_binding_text")
    assert len(image) == 12 and image != text and weights_fingerprint("tiny_kimi") is None
    rc = runner.result_config(job_config(tmp_path, "testbed=toy_binding"))
    assert rc["model"]["weights"] == image


def test_plain_sbatch_array_writes_the_same_shard_as_hydra(tmp_path):
    """SLURM/array.sbatch runs one manifest line (srun faked) into the store a Hydra job would use."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/sh\nexec "$@"\n')
    (bin_dir / "srun").chmod(0o755)
    overrides = ["model=tiny_llava", "arms=[blind,patch_r8]", "n_items=1",
                 f"paths.results={tmp_path}/raw", f"paths.outputs={tmp_path}/out"]
    manifest = tmp_path / "jobs.txt"
    manifest.write_text("model=tiny_kimi n_items=1\n" + " ".join(overrides) + "\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_ARRAY_TASK_ID": "1",
           "SLURM_ARRAY_JOB_ID": "77", "KAMERA_VENV": sys.prefix, "KAMERA_DEVICE": "cpu", "WANDB_MODE": "disabled"}
    proc = subprocess.run(["bash", "SLURM/array.sbatch", str(manifest)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = load_rows(tmp_path / "raw")
    assert set(rows["model"]) == {"tiny_llava"} and len(rows) == 2  # line 2 ran, line 1 did not
    expected = config_hash(runner.result_config(job_config(tmp_path, *overrides[:3])))
    assert set(rows["config_hash"]) == {expected}
