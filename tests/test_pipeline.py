"""The experiment pipeline: config composition, job identity, the results store, resume, sweeps, renderers.

The adversarial cases of issue 9 (double counting, identity, partial data, typos, preflight, corrupt
shards, results roots, sweep expansion, operations) live in ``tests/pipeline/``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from pipeline.pipeline_support import ROOT, all_rows, cli, env, finish, job_config
from tiers import per_experiment

from experiments import fig5, table3
from kamera import job
from kamera.engine.sglang_server import sglang_python
from kamera.job import CONF_DIR, JobError, build_specs, config_key
from kamera.job.store import Shard, ShardLockedError
from kamera.provenance import digest
from kamera.run import runner
from kamera.sweep import compose_config, expand

GOLDEN = Path(__file__).parent / "golden"
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


# ----- configs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("experiment", per_experiment(EXPERIMENTS))
def test_every_experiment_composes_and_its_arms_resolve(experiment):
    jobs = expand([f"experiment={experiment}"])
    assert len(jobs) >= 1  # Table 6 is one model on one benchmark
    for overrides in jobs:
        cfg = compose_config(overrides)
        assert cfg.group == experiment
        assert [s.label for s in build_specs("arm", cfg.arms)] == list(cfg.arms)
        assert job.validate(cfg) == []
        if experiment.endswith("_tiny"):
            # an engine=vllm job runs in the engine venv, an engine=sglang job beside the SGLang venv; elsewhere its
            # preflight names that one thing
            engine = cfg.engine.name if cfg.get("engine") is not None else None
            missing = {"vllm": importlib.util.find_spec("vllm") is None, "sglang": not sglang_python().is_file()}
            absent = {"vllm": "engine=vllm: vLLM is not installed", "sglang": "engine=sglang: no SGLang venv at"}
            lacks = missing.get(engine, False)
            problems = job.preflight(cfg)
            assert problems == ([p for p in problems if p.startswith(absent[engine])] if lacks else [])
            assert len(problems) == lacks


def test_every_registered_model_has_its_conf_file():
    """``model=<name>`` works for every model the registry knows (each conf/model file names its model)."""
    from kamera.models.registry import model_names

    files = {p.stem: p.read_text() for p in (CONF_DIR / "model").glob("*.yaml")}
    assert sorted(set(model_names()) - set(files)) == []
    assert all(f"\nname: {n}\n" in f"\n{text}" for n, text in files.items())


def test_every_arm_and_probe_file_builds():
    arms = build_specs("arm", job.conf_labels("arm"))
    assert {"reprefill", "blind", "oracle4d", "patch_r16", "patch_full"} <= {s.label for s in arms}
    probes = {s.label for s in build_specs("probe", job.conf_labels("probe"))}
    assert {"deficit_norms", "deficit_heads", "injection_depth", "energy", "relocation", "ttft"} <= probes


def test_config_key_ignores_operational_keys_and_arms_and_follows_result_keys(tmp_path):
    base = config_key(job_config(tmp_path))
    for op in (
        "device=cpu",
        "paths.results=/elsewhere",
        "tracking=offline",
        "model.attn_implementation=eager",
        "progress_every_s=1",
        "group=other",
        "launcher=submitit_local",
        "threads=2",
        "model.path=/x",
        "arms=[blind,patch_r8]",
        "probes=[deficit_norms]",
        "model.dtype=fp32",
        "bench.subset=bind",
        "item_offset=0",  # an option added later, at its default: every stored job keeps its key
    ):
        assert config_key(job_config(tmp_path, op)) == base, op
    for res in (
        "model=tiny_kimi",
        "model.dtype=bfloat16",
        "n_items=9",
        "seed=1",
        "bench.kwargs.n_a_chunks=3",
        "canonical_context=none",
        "eta_floor=1e-3",
        "max_new_tokens=3",
        "item_offset=20",
    ):
        assert config_key(job_config(tmp_path, res)) != base, res


def test_rows_follow_an_arm_files_knobs(tmp_path, monkeypatch):
    arm_dir = tmp_path / "conf" / "arm"
    arm_dir.mkdir(parents=True)
    for p in (CONF_DIR / "arm").glob("*.yaml"):
        (arm_dir / p.name).write_text(p.read_text())
    monkeypatch.setattr(job.spec, "CONF_DIR", tmp_path / "conf")
    before = build_specs("arm", ["patch_r16"])[0]
    family = arm_dir / "patch.yaml"  # patch_r16 is a label of the patch family's file
    family.write_text(family.read_text().replace("patch_r16: {rank: 16}", "patch_r16: {rank: 17}"))
    after = build_specs("arm", ["patch_r16"])[0]
    assert before.label == after.label and before.key != after.key  # the same label with new knobs is a new arm
    assert after.plugin.rank == 17 and after.knobs["layers"] == "all"  # the label's knobs over the file's


def test_a_family_file_defines_its_labels_once(tmp_path, monkeypatch):
    """A variant family is one file: its labels: each the file's knobs with their own over them; a label two files
    define, or a labels: that is not a mapping of knobs, is one line naming the files."""
    arm_dir = tmp_path / "conf" / "arm"
    arm_dir.mkdir(parents=True)
    monkeypatch.setattr(job.spec, "CONF_DIR", tmp_path / "conf")
    (arm_dir / "fam.yaml").write_text(
        "name: patch\nlayers: all\nlabels:\n  p_a: {rank: 3}\n  p_b: {rank: 5, layers: deep_half}\n"
    )
    a, b = build_specs("arm", ["p_a", "p_b"])
    assert (a.plugin.rank, a.knobs["layers"], b.plugin.rank, b.knobs["layers"]) == (3, "all", 5, "deep_half")
    assert job.conf_labels("arm") == ["p_a", "p_b"]  # the file's own stem is not a label: it lists its labels
    (arm_dir / "p_a.yaml").write_text("name: patch\nrank: 4\n")
    with pytest.raises(ValueError, match=r"conf/arm defines 'p_a' twice \(fam.yaml and p_a.yaml\)"):
        build_specs("arm", ["p_b"])
    (arm_dir / "p_a.yaml").unlink()
    (arm_dir / "fam.yaml").write_text("name: patch\nlabels: [p_a, p_b]\n")
    with pytest.raises(ValueError, match=r"fam\.yaml: labels: must map each label"):
        job.conf_labels("arm")


def test_bad_names_and_missing_paths_fail_before_any_forward(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.delenv("KAMERA_DATA", raising=False)
    monkeypatch.delenv("KAMERA_MODELS", raising=False)
    cases = {
        "arms=[blind,patch_r999]": "conf/arm has: blind",
        "model.name=qwen9": "unknown model 'qwen9'; registered models: tiny_deepseek_v2, ",
        "bench.name=nope": "unknown benchmark 'nope'; valid names: ['binding_words', 'egoschema'",
        "bench=mm_niah_reasoning": "KAMERA_DATA is not set",
        "model=qwen2_5_vl_7b": "hf download Qwen/Qwen2.5-VL-7B-Instruct",
        "probes=[nope]": "conf/probe has: deficit_basis, deficit_basis_patch, deficit_heads",
    }
    for override, message in cases.items():
        with pytest.raises(JobError) as err:
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
    shard.append(
        "rows",
        [
            {"item_id": "a", "arm": "x", "knobs": "{}", "kl": 1.0},
            {"item_id": "a", "arm": "y", "knobs": "{}", "kl": 2.0},
        ],
    )
    with pytest.raises(ValueError, match="duplicate"):
        shard.append("rows", [{"item_id": "a", "arm": "x", "knobs": "{}", "kl": 3.0}])
    shard.append("rows", [{"item_id": "a", "arm": "x", "knobs": '{"k":1}', "kl": 3.0}])  # other knobs: another arm

    def crash(self, path, **kw):  # a kill mid-write leaves a partial temp file, never a partial shard
        Path(path).write_bytes(b"PAR1 half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", crash)
    with pytest.raises(KeyboardInterrupt):
        shard.append("rows", [{"item_id": "b", "arm": "x", "knobs": "{}", "kl": 0.5}])
    monkeypatch.undo()
    assert list(shard.rows()["item_id"]) == ["a", "a", "a"]
    assert not (tmp_path / "g" / ".abc.parquet.tmp").exists()  # the partial temp file is removed, not left


def test_a_second_job_on_the_same_shard_fails_fast(tmp_path):
    shard = Shard(tmp_path, "g", "abc")
    with shard.locked(), pytest.raises(ShardLockedError, match="another job"), Shard(tmp_path, "g", "abc").locked():
        pass
    with shard.locked(), Shard(tmp_path, "g", "abc").locked(required=False) as mine:
        assert mine is False


# ----- jobs end to end -----------------------------------------------------------------------------
ARMS3 = "arms=[reprefill,blind,patch_r8]"


def test_job_rows_metrics_provenance_and_skip_on_rerun(tmp_path, caplog):
    cfg = job_config(tmp_path, "model=tiny_llava", ARMS3, "n_items=2")
    path = runner.run(cfg)
    rows = pd.read_parquet(path)
    assert len(rows) == 6 and rows.groupby(["item_id", "arm"]).size().max() == 1
    ref = rows[rows["arm"] == "reprefill"]
    assert (ref["kl"] == 0).all() and (ref["eta"] == 1).all()
    blind = rows[rows["arm"] == "blind"]
    assert (blind["kl"] == blind["kl_blind"]).all() and (blind["bytes"] == 0).all()
    assert (blind["forwards"] == 0).all() and (blind["patch_dtype"] == "").all()  # blind's forward is shared
    patch = rows[rows["arm"] == "patch_r8"]
    assert (patch["rank"] == 8).all() and (patch["effective_rank"] == 8).all()
    assert (patch["eta"] > 0.9).all() and (patch["bytes_frac"] > 0).all()
    assert (patch["forwards"] == 1).all() and (patch["patch_dtype"] == "float32").all()  # its own query forward
    assert set(rows["pred"]) <= set("ABCD") and rows["correct"].isin([0.0, 1.0]).all()
    meta = json.loads(path.with_suffix(".json").read_text())
    run = meta["runs"][0]
    for key in (
        "commit",
        "dirty",
        "kamera",
        "torch",
        "transformers",
        "device_name",
        "dtype",
        "attention",
        "start",
        "end",
        "hostname",
        "slurm",
    ):
        assert key in run, key
    assert run["dtype"] == "float32" and run["attention"] == "sdpa" and run["device"] == "cpu"
    assert run["items_run"] == cfg.n_items and run["seconds_per_item"] > 0 and run["peak_memory_bytes"] > 2**20
    assert meta["identity"]["checkpoint"].startswith("tiny:") and meta["config_key"] == config_key(cfg)
    with caplog.at_level("INFO", logger="kamera.run"):
        assert runner.run(cfg) == path
    assert "nothing to run" in caplog.text
    assert len(pd.read_parquet(path)) == 6


def test_open_answer_items_are_greedy_decoded_and_scored(tmp_path):
    from kamera.data import make_fixture

    root = make_fixture("musique", tmp_path / "data", n=2)
    rows = pd.read_parquet(
        runner.run(
            job_config(
                tmp_path,
                "testbed=tiny_deepseek_v2",
                f"bench.root={root}",
                "arms=[reprefill,blind]",
                "n_items=2",
                "max_new_tokens=3",
            )
        )
    )
    assert len(rows) == 4 and rows["correct"].between(0, 1).all() and (rows["n_choices"] == 0).all()
    assert (rows["forwards"] == 0).all()  # greedy decoding is scoring, not the arm: re-prefill and blind run none


@pytest.mark.integration
def test_resume_after_kill_loses_nothing_and_duplicates_nothing(tmp_path):
    overrides = ("model=tiny_qwen2_5_vl", ARMS3, "n_items=6")
    proc = cli(tmp_path, *overrides, start_new_session=True)
    shard_dir = tmp_path / "raw" / "adhoc"
    deadline = time.time() + 240
    while time.time() < deadline and not list(shard_dir.glob("*[0-9a-f].parquet")):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9 mid-sweep
    proc.communicate()
    partial = all_rows(tmp_path / "raw")
    k = partial["item_id"].nunique()
    assert 0 < k < 6
    out = finish(cli(tmp_path, *overrides))
    assert f"6 items selected, {6 - k} with arms or probes to run" in out
    rows = all_rows(tmp_path / "raw")
    assert len(rows) == 18 and rows["item_id"].nunique() == 6
    assert rows.groupby(["item_id", "arm"]).size().eq(1).all()


@pytest.mark.integration
def test_multirun_with_the_local_submitit_launcher(tmp_path):
    out = finish(
        cli(tmp_path, "testbed=tiny_qwen2_5_vl,tiny_kimi", ARMS3, "n_items=2", "launcher=submitit_local", multirun=True)
    )
    rows = all_rows(tmp_path / "raw")
    assert len(rows) == 2 * 2 * 3, out[-2000:]
    assert set(rows["model"]) == {"tiny_qwen2_5_vl", "tiny_kimi"} and rows["job_key"].nunique() == 2


def test_an_arm_that_refuses_the_family_is_skipped_with_its_reason(tmp_path):
    path = runner.run(job_config(tmp_path, "model=tiny_kimi", "arms=[blind,shadowkv_r16]", "n_items=1"))
    assert set(pd.read_parquet(path)["arm"]) == {"blind"}
    refusals = json.loads(path.with_suffix(".json").read_text())["refusals"]
    assert refusals[0]["arm"] == "shadowkv_r16" and refusals[0]["item_id"] is None and "MLA" in refusals[0]["reason"]


def test_identity_follows_shipped_weights(tmp_path):
    from kamera.models.registry import weights_fingerprint

    image, text = weights_fingerprint("toy_binding"), weights_fingerprint("toy_binding_text")
    assert len(image) == 12 and image != text and weights_fingerprint("tiny_kimi") is None
    assert job.checkpoint_fingerprint(job_config(tmp_path, "testbed=toy_binding")) == f"toy:{image}"


# ----- renderers on a fixed rows frame -------------------------------------------------------------
def fixed_rows() -> pd.DataFrame:
    """A deterministic rows frame: 2 models × 1 subset × 4 arms × 6 items, plus a rank sweep.

    tiny_kimi's n_B is 24, so its rank-64 patch is clamped to rank 24, the full rank."""
    rows = []
    for mi, model in enumerate(["qwen2_5_vl_7b", "tiny_kimi"]):
        full = 512 if mi == 0 else 24
        for i in range(6):
            for ai, arm in enumerate(["reprefill", "blind", "patch_r16", "patch_r64", "patch_r1", "patch_full"]):
                rank = {"patch_r16": 16, "patch_r64": 64, "patch_r1": 1}.get(arm, math.nan)
                kl = 0.0 if arm in ("reprefill", "patch_full") else 0.5 / (1 + ai) / (1 + mi)
                rows.append(
                    {
                        "model": model,
                        "subset": "reasoning-image",
                        "arm": arm,
                        "item_id": f"i{i}",
                        "n_choices": 2,
                        "correct": float((i * (ai + 1) + mi) % 4 != 0),
                        "kl": kl + 1e-6 * i,
                        "rank": rank,
                        "effective_rank": float(full if math.isnan(rank) else min(rank, full)),
                        "arm_name": "blind" if arm == "blind" else ("reprefill" if arm == "reprefill" else "patch"),
                        "params": '{"granularity": "layer", "layers": "all"}',
                    }
                )
    return pd.DataFrame(rows)


def test_table3_renders_the_golden_markdown_and_latex(tmp_path):
    md, paths = table3.render(fixed_rows(), "golden", tmp_path / "table3")
    assert md == (GOLDEN / "table3.md").read_text()
    assert paths[1].read_text() == (GOLDEN / "table3.tex").read_text()
    assert "(paper 0.59)" in md  # the paper's value sits beside ours at paper scale
    md, paths = table3.render(fixed_rows(), "golden", tmp_path / "t", footer="PARTIAL (1 incomplete job(s)). rows: x")
    assert "golden, partial" in md and md.rstrip().endswith("_PARTIAL (1 incomplete job(s)). rows: x_")
    assert paths[1].read_text().startswith("% PARTIAL")


def test_fig5_renders_byte_identical_files_and_the_golden_curve(tmp_path):
    md, paths = fig5.render(fixed_rows(), "golden", tmp_path / "a")
    _, again = fig5.render(fixed_rows(), "golden", tmp_path / "b")
    assert md == (GOLDEN / "fig5.md").read_text()
    for p, q in zip(paths, again, strict=True):
        assert p.read_bytes() == q.read_bytes(), p.suffix
    assert paths[0].read_bytes().startswith(b"%PDF") and b"CreationDate" not in paths[0].read_bytes()


def test_fig5_plots_the_effective_rank_not_a_requested_rank_above_full():
    frame = fig5.curve(fixed_rows())
    kimi = frame[frame["model"] == "tiny_kimi"].set_index("m")
    assert kimi.at["64", "m_eff"] == 24 == kimi.at["full", "m_eff"] and kimi.at["16", "m_eff"] == 16
    assert "(m_eff 24)" in fig5.to_markdown(frame, "g")


# ----- Slurm ---------------------------------------------------------------------------------------
def fake_bin(tmp_path: Path, **scripts: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.mark.integration
def test_plain_sbatch_array_writes_the_same_shard_as_hydra(tmp_path):
    """SLURM/array.sbatch runs one manifest line (srun faked) into the store a Hydra job would use; the line
    is the sweep's shell-quoted manifest line, with a space and a quote in a value."""
    from kamera.sweep import expand, manifest_line

    bin_dir = fake_bin(tmp_path, srun='exec "$@"')
    results = tmp_path / "my results" / "it's"
    overrides = [
        "model=tiny_llava",
        "arms=[blind, patch_r8]",
        "n_items=1",
        f'paths.results="{results}"',
        f"paths.outputs={tmp_path}/out",
    ]
    (line,) = expand(overrides)
    manifest = tmp_path / "jobs.txt"
    manifest.write_text("model=tiny_kimi n_items=1\n" + manifest_line(line) + "\n")
    run_env = env(
        PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_JOB_ID="77", KAMERA_VENV=sys.prefix
    )
    proc = subprocess.run(
        ["bash", "SLURM/array.sbatch", str(manifest)],
        cwd=ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = all_rows(results)
    assert set(rows["model"]) == {"tiny_llava"} and len(rows) == 2  # line 2 ran, line 1 did not
    assert set(rows["config_key"]) == {config_key(job_config(tmp_path, *overrides[:3]))}
    meta = json.loads(next((results / "adhoc").glob("*.json")).read_text())
    assert (
        digest(meta["identity"]) == rows["job_key"].iloc[0] and meta["runs"][0]["slurm"]["SLURM_ARRAY_JOB_ID"] == "77"
    )


@pytest.mark.integration
def test_the_sbatch_scripts_submit_themselves_and_create_their_log_folder(tmp_path):
    """Outside Slurm, SLURM/array.sbatch MANIFEST submits itself as an array of the manifest's length (and
    driver.sbatch itself), after creating logs/slurm/ (Slurm opens --output before the script runs)."""
    log = tmp_path / "sbatch.log"
    bin_dir = fake_bin(tmp_path, sbatch=f'echo "$@" >> "{log}"')
    manifest = tmp_path / "jobs.txt"
    manifest.write_text("model=tiny_kimi\nmodel=tiny_llava\nmodel=tiny_qwen3_vl\n")
    run_env = {k: v for k, v in env(PATH=f"{bin_dir}:{os.environ['PATH']}").items() if not k.startswith("SLURM_")}
    for script, args in (("array.sbatch", [str(manifest), "2"]), ("driver.sbatch", ["table3", "n_items=3"])):
        proc = subprocess.run(
            ["bash", str(ROOT / "SLURM" / script), *args],
            cwd=tmp_path,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "logs" / "slurm").is_dir()
    calls = log.read_text().splitlines()
    assert calls[0] == f"--array=0-2%2 {ROOT}/SLURM/array.sbatch {manifest}"
    assert calls[1] == f"{ROOT}/SLURM/driver.sbatch table3 n_items=3"


def test_a_sweep_preflights_with_its_choice_overrides():
    """``kamera.sweep --check`` with a sweep override (what ``make`` and the rehearsal pass): the launcher check
    composes one job, not the sweep, which only composes under --multirun."""
    from kamera.sweep.expand import main

    assert main(["--check", "experiment=table3_tiny", "seed=choice(0,1)"]) == 0
