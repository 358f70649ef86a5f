"""Issue 19 (trust under change), items 6, 7, 11 and 12: nothing deleted or truncated that the harness did not
make, a complete job on read-only storage is "nothing to run", and bad inputs are one line, not a traceback."""

from __future__ import annotations

import errno
import logging
import shutil
from contextlib import contextmanager

import matplotlib.figure
import matplotlib.pyplot as plt
import pytest
from pipeline_support import job_config

from kamera import job
from kamera.job import JobError
from kamera.job import spec as job_spec
from kamera.job.store import Shard
from kamera.run import runner
from kamera.sweep import compose_config, rehearse
from kamera.sweep.cost import experiment_hours
from kamera.sweep.status import report, sweep_jobs

TINY = ("model=tiny_kimi", "bench=synthetic", "arms=[blind]", "n_items=1")


@pytest.fixture
def done_job(tmp_path):
    """A complete tiny job under ``tmp_path/raw``: (its overrides, its rows' path)."""
    overrides = (f"paths.results={tmp_path}/raw", *TINY)
    return overrides, runner.run(job_config(tmp_path, *TINY))


# ----- item 6: a rehearsal deletes only what it created ---------------------------------------------------
def test_rehearse_refuses_an_out_folder_holding_results_it_did_not_create(tmp_path, monkeypatch, capsys):
    theirs = tmp_path / "results" / "table3" / "abc.parquet"
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(b"rows")
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "table3.md").write_text("a table")
    monkeypatch.setattr(rehearse, "models_root", lambda *a, **k: pytest.fail("the rehearsal went on"))
    assert rehearse.main(["--experiments", "table3", "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did not create" in err and str(tmp_path / "results") in err
    assert theirs.read_bytes() == b"rows" and (tmp_path / "outputs" / "table3.md").read_text() == "a table"


def test_rehearse_empties_only_the_folders_it_marked(tmp_path):
    rehearse.fresh_folders(tmp_path)  # a first rehearsal: creates and marks both
    for name in rehearse.OWN:
        assert (tmp_path / name / rehearse.MARKER).is_file()
        (tmp_path / name / "old.parquet").write_bytes(b"old rows")
    assert rehearse.not_ours(tmp_path) == []
    rehearse.fresh_folders(tmp_path)  # the next one: its own folders emptied, still marked
    for name in rehearse.OWN:
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == [rehearse.MARKER]
    (tmp_path / "results" / rehearse.MARKER).unlink()
    (tmp_path / "results" / "theirs.parquet").write_bytes(b"rows")
    assert rehearse.not_ours(tmp_path) == [tmp_path / "results"]


# ----- item 7: a figure is replaced atomically --------------------------------------------------------------
class Killed(BaseException):
    """kill -9 in the middle of a savefig."""


def _figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return fig


def test_a_kill_during_a_figure_render_keeps_the_previous_figure(tmp_path, monkeypatch):
    from experiments.common import save_figure

    stem = tmp_path / "figures" / "fig5_tiny"
    pdf, png = save_figure(_figure(), stem)
    good = {p: p.read_bytes() for p in (pdf, png)}
    assert all(len(b) > 100 for b in good.values())
    save = matplotlib.figure.Figure.savefig

    def dies_halfway(self, fname, *args, **kwargs):
        with open(fname, "wb") as fh:  # the file is opened (truncated) before the first byte is drawn
            fh.write(b"%PDF-1.4 half")
        raise Killed

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", dies_halfway)
    with pytest.raises(Killed):
        save_figure(_figure(), stem)
    assert {p: p.read_bytes() for p in (pdf, png)} == good
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", save)
    assert save_figure(_figure(), stem) == [pdf, png] and pdf.read_bytes() == good[pdf]  # byte-stable still
    assert sorted(p.name for p in stem.parent.iterdir()) == ["fig5_tiny.pdf", "fig5_tiny.png"]


# ----- item 11: a complete job on read-only storage ---------------------------------------------------------
def _read_only(*args, **kwargs):
    raise OSError(errno.EROFS, "Read-only file system")


@pytest.mark.parametrize("where", ["lock", "meta"])
def test_a_complete_job_on_read_only_storage_has_nothing_to_run(where, tmp_path, done_job, monkeypatch, caplog):
    _, path = done_job
    if where == "lock":
        @contextmanager
        def locked(self, required=True):
            _read_only()
            yield True

        monkeypatch.setattr(Shard, "locked", locked)
    else:
        monkeypatch.setattr(Shard, "write_meta", _read_only)
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a complete job loaded a model"))
    with caplog.at_level(logging.INFO, logger="kamera.run"):
        assert runner.run(job_config(tmp_path, *TINY)) == path
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Read-only file system" in warnings[0] and "\n" not in warnings[0]
    assert any("nothing to run" in r.getMessage() for r in caplog.records)


# ----- item 12: one line, not a traceback ---------------------------------------------------------------------
def test_status_notes_a_job_its_cost_block_does_not_cover(tmp_path):
    lines = report(sweep_jobs(["experiment=table3", "bench=muirbench", f"paths.results={tmp_path}/raw"]))
    jobs = [line for line in lines if "bench=muirbench" in line]
    assert len(jobs) == 2
    assert all("no cost estimate: table3: the experiment states no cost.tokens for muirbench" in j for j in jobs)


def test_a_foreign_json_in_the_group_folder_is_skipped_with_a_warning(tmp_path, done_job, caplog):
    overrides, path = done_job
    (path.parent / "notes.json").write_text("[1, 2]")  # another tool's JSON
    (path.parent / "sync-state.json").write_text("{trunc")  # and one that does not parse
    (path.parent / "0123456789ab.json").write_text('{"written_by": "someone else"}')
    with caplog.at_level(logging.WARNING, logger="kamera.store"):
        (view,) = sweep_jobs(list(overrides))
    assert view.error is None and view.state.complete and len(view.rows()) == 1
    warned = " ".join(r.getMessage() for r in caplog.records)
    for name in ("notes.json", "sync-state.json", "0123456789ab.json"):
        assert str(path.parent / name) in warned


def test_a_corrupt_shard_of_the_experiment_stays_an_error_naming_it(tmp_path, done_job):
    overrides, path = done_job
    bad = path.with_suffix(".json")  # the job's own json: its rows beside it name the job's config
    bad.write_text('{"config_key": ')
    (view,) = sweep_jobs(list(overrides))
    assert view.error and str(bad) in view.error


def test_a_corrupt_json_no_job_of_the_sweep_owns_blocks_nothing(tmp_path, done_job, caplog, capsys):
    """Issue 29 item 8: one corrupt foreign ``0000deadbeef.json`` marked every job "corrupt" and blocked the render,
    with advice ("rerun the job: it rewrites it") no job could follow. It is skipped with a warning naming it."""
    from experiments import table3

    overrides, path = done_job
    foreign = path.parent / "0000deadbeef.json"
    foreign.write_text('{"config_key": "trunc')
    other = path.parent / "0000deadbeee.json"  # a shard of another config whose json broke: its rows say whose it is
    other.write_text("{")
    shutil.copy(path, other.with_suffix(".parquet"))
    frame = __import__("pandas").read_parquet(other.with_suffix(".parquet")).assign(config_key="another0cfg")
    frame.assign(job_key=other.stem).to_parquet(other.with_suffix(".parquet"))
    with caplog.at_level(logging.WARNING, logger="kamera.store"):
        (view,) = sweep_jobs(list(overrides))
    assert view.error is None and view.state.complete
    warned = [r.getMessage() for r in caplog.records]
    assert any(str(foreign) in w for w in warned) and any(str(other) in w for w in warned), warned
    exp = ("experiment=table3_tiny", "testbed=tiny_llava", "arms=[blind]", "n_items=1")
    runner.run(job_config(tmp_path, *exp))
    (path.parent.parent / "table3_tiny" / foreign.name).write_text("{")
    table3.main([*exp, f"paths.results={tmp_path}/raw", "--out", str(tmp_path / "t3")])
    assert (tmp_path / "t3.md").exists()
    capsys.readouterr()


def test_a_job_with_no_arm_and_no_probe_fails_preflight(tmp_path, monkeypatch):
    cfg = job_config(tmp_path, "model=tiny_kimi", "bench=synthetic", "arms=[]", "probes=[]", "n_items=1")
    assert "arms=[] and probes=[]: a job needs at least one arm or probe (conf/arm, conf/probe)" in job.preflight(cfg)
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(JobError, match="a job needs at least one arm or probe"):
        runner.run(cfg)
    assert not (tmp_path / "raw").exists()
    probes_only = job_config(tmp_path, "model=tiny_kimi", "bench=synthetic", "arms=[]", "probes=[deficit_norms]")
    assert not [p for p in job.preflight(probes_only) if "at least one arm" in p]


@pytest.mark.parametrize(("value", "line"), [("-5", "n_items=-5: must be an integer >= 1"),
                                             ("abc", "n_items='abc': must be an integer >= 1"),
                                             ("0", "n_items=0: must be an integer >= 1")])
def test_the_cost_tool_names_a_bad_n_items(value, line):
    with pytest.raises(ValueError, match=line):
        experiment_hours(["experiment=table3", f"n_items={value}"])


def test_an_invalid_yaml_in_conf_arm_is_one_line_naming_the_file(tmp_path, monkeypatch):
    shutil.copytree(job_spec.CONF_DIR / "arm", tmp_path / "arm")
    bad = tmp_path / "arm" / "patch_broken.yaml"
    bad.write_text("name: patch\n  rank: [16\n")
    monkeypatch.setattr(job_spec, "CONF_DIR", tmp_path)
    with pytest.raises(ValueError) as err:
        job_spec.build_specs("arm", ["blind", "patch_broken"])
    assert str(bad) in str(err.value) and "not valid YAML (line 2" in str(err.value) and "\n" not in str(err.value)
    cfg = job_config(tmp_path, "model=tiny_kimi", "bench=synthetic", "arms=[blind,patch_broken]", "n_items=1")
    assert [p for p in job.preflight(cfg) if str(bad) in p]


# ----- item 9: inputs checkable before load fail in preflight -------------------------------------------------
CHECKABLE = {
    "ttft_cuda on cpu": (
        ("model=tiny_kimi", "bench=synthetic", "arms=[blind]", "probes=[ttft_cuda]", "device=cpu"),
        "probes: ttft_cuda: the ttft probe is set to time on cuda but the job runs on cpu"),
    "reuse_layers beyond depth": (
        ("model=tiny_kimi", "bench=synthetic", "arms=[{shallow_reprefill:{reuse_layers:99}}]"),
        "arms: shallow_reprefill[reuse_layers=99]: reuse_layers=99 exceeds the model's 4 layers"),
    "patch layers beyond depth": (
        ("model=tiny_kimi", "bench=synthetic", "arms=[{patch_r8:{layers:[1,7]}}]"),
        "arms: patch_r8[layers=[1,7]]: patch layers [7] are beyond the model's 4 layers (0..3)"),
    "injection_depth layers beyond depth": (
        ("model=tiny_llava", "bench=synthetic", "arms=[]", "probes=[{injection_depth:{layers:[9]}}]"),
        "probes: injection_depth[layers=[9]]: injection_depth layers [9] are beyond the model's"),
    "tau not a multiple of 1/k": (
        ("model=tiny_kimi", "bench=window_synthetic", "arms=[]", "window_probes=[{recall:{taus:[0.3,0.4]}}]"),
        "window_probes: recall[taus=[0.3,0.4]]: recall: taus [0.3] are not multiples of 1/k for the window of k = 5"),
    "negative patch layer": (
        ("model=tiny_kimi", "bench=synthetic", "arms=[{patch_r8:{layers:[-1]}}]"),
        "patch layers must be one of ('all', 'deep_half') or a list of layer indices >= 0, got [-1]"),
    "fractional patch layer": (
        ("model=tiny_kimi", "bench=synthetic", "arms=[{patch_r8:{layers:[1.5]}}]"),
        "patch layers must be one of ('all', 'deep_half') or a list of layer indices >= 0"),
    "cacheblend check layer beyond depth": (
        ("model=tiny_kimi", "bench=synthetic", "arms=[{cacheblend:{check_layer:99}}]"),
        "arms: cacheblend[check_layer=99]: cacheblend: check layers 99..99 exceed the model's 4 layers"),
    "orbit orderings not lists": (
        ("model=tiny_kimi", "bench=synthetic", "arms=[{orbit_r16:{orderings:5}}]"),
        "orbit: orderings must be null or a list of orderings (lists of chunk indices), got 5"),
    "toy subset": (("model=toy_binding", "bench=binding", "bench.subset='two_hop,nope'", "arms=[blind]"),
                   "bench.subset='two_hop,nope': the toy task has no query kind ['nope']"),
    "toy task on another model": (("model=tiny_kimi", "bench=binding", "arms=[blind]"),
                                  "bench=binding needs a toy model (toy_binding, toy_binding_text), not tiny_kimi"),
}


@pytest.mark.parametrize("case", list(CHECKABLE))
def test_inputs_checkable_before_load_fail_in_preflight(case, tmp_path, monkeypatch):
    overrides, line = CHECKABLE[case]
    cfg = job_config(tmp_path, *overrides, "n_items=1")
    problems = job.preflight(cfg)
    assert [p for p in problems if p.startswith(line)] and all("\n" not in p for p in problems), problems
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(JobError, match="cannot start this job"):
        runner.run(cfg)
    assert not (tmp_path / "raw").exists()


def test_the_same_plugins_within_the_model_pass_preflight(tmp_path):
    ok = job_config(tmp_path, "model=tiny_kimi", "bench=synthetic", "arms=[{shallow_reprefill:{reuse_layers:4}},"
                    "{patch_r8:{layers:[0,3]}}]", "probes=[ttft_tiny]", "device=cpu", "n_items=1")
    assert job.preflight(ok) == []
    window = job_config(tmp_path, "model=tiny_kimi", "bench=window_synthetic", "arms=[]",
                        "window_probes=[{recall:{taus:[0.2,0.4]}}]", "n_items=1")
    assert job.preflight(window) == []


# ----- item 8: a checkpoint's files are checked before its weights load ------------------------------------------
def _sharded_checkpoint(path):
    """A 1-layer Qwen2 saved in several safetensors shards with an index, a tokenizer file and a chat template."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=64, max_position_embeddings=64)
    Qwen2ForCausalLM(config).save_pretrained(path, max_shard_size="4KB")
    (path / "tokenizer.json").write_text("{}")
    (path / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    return path


def _truncate(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[:-64])
    return f"{shard}: truncated: its tensors end at byte"


def _drop_shard(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    shard.unlink()
    return f"names shard(s) ['{shard.name}'] that are not in {ckpt}"


def _bad_config(ckpt):
    (ckpt / "config.json").write_text('{"model_type": "qwen2",')
    return f"{ckpt / 'config.json'} does not parse: JSONDecodeError"


def _bad_header(ckpt):
    shard = sorted(ckpt.glob("*.safetensors"))[0]
    blob = bytearray(shard.read_bytes())
    blob[8:10] = b"[{"  # the JSON header no longer parses
    shard.write_bytes(bytes(blob))
    return f"{shard}: its header does not parse"


def _no_tokenizer(ckpt):
    (ckpt / "tokenizer.json").unlink()
    return f"{ckpt} has no tokenizer file (one of tokenizer.json"


def _moved_tensor(ckpt):
    import json

    index = ckpt / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    name = next(iter(data["weight_map"]))
    others = sorted(set(data["weight_map"].values()) - {data["weight_map"][name]})
    data["weight_map"][name] = others[0]
    index.write_text(json.dumps(data))
    return f"{index} assigns 1 tensor(s) to shards that do not hold them (e.g. {name!r})"


def _no_index(ckpt):  # issue 29 item 6: transformers then finds no weights and fails at load with a traceback
    (ckpt / "model.safetensors.index.json").unlink()
    return f"{ckpt} holds sharded weights (model-00001-of-"


@pytest.mark.parametrize("damage", [_truncate, _drop_shard, _bad_config, _bad_header, _no_tokenizer, _moved_tensor,
                                    _no_index], ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_checkpoint_is_one_line_before_its_weights_load(damage, tmp_path, monkeypatch):
    from kamera.job.checks import checkpoint_problems

    ckpt = _sharded_checkpoint(tmp_path / "ckpt")
    assert len(list(ckpt.glob("*.safetensors"))) >= 3 and checkpoint_problems(ckpt) == []
    line = damage(ckpt)
    problems = checkpoint_problems(ckpt)
    assert len(problems) == 1 and line in problems[0] and "\n" not in problems[0], problems
    cfg = job_config(tmp_path, "model=hf", f"model.path={ckpt}", "bench=synthetic",
                     "arms=[blind]", "n_items=1")
    found = job.preflight(cfg)  # a config.json that does not parse is the registry's own first line
    assert [p for p in found if line in p or (damage is _bad_config and "config.json is not valid JSON" in p)], found
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(JobError, match="cannot start this job"):
        runner.run(cfg)


def test_the_shipped_toy_weights_pass_and_a_truncated_copy_does_not(tmp_path):
    from kamera.job.checks import checkpoint_problems

    shipped = job_spec.CONF_DIR.parent / "kamera" / "toy" / "weights" / "image"
    assert checkpoint_problems(shipped, tokenizer=False) == []
    copy = shutil.copytree(shipped, tmp_path / "image")
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (problem,) = checkpoint_problems(copy, tokenizer=False)
    assert problem.startswith(f"{weights}: truncated")


@pytest.mark.integration
def test_partial_0_renders_complete_jobs_only_and_a_bad_value_is_named():
    import os
    import subprocess

    from pipeline_support import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}

    def dry(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", "--no-print-directory", "-n", "render", "EXP=table3_tiny", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, env=env)

    for value in ("0", "false", "no", ""):
        out = dry(f"PARTIAL={value}")
        assert out.returncode == 0 and "--allow-partial" not in out.stdout, (value, out.stdout)
    assert dry("PARTIAL=1").stdout.rstrip().endswith("--allow-partial")
    bad = dry("PARTIAL=maybe")
    assert bad.returncode != 0 and "PARTIAL=maybe: must be 1 (render incomplete jobs too) or 0" in bad.stderr
    assert "launcher=slurm_h100" in subprocess.run(  # the sweep's preflight sees the launcher it will use
        ["make", "--no-print-directory", "-n", "table3", "LAUNCHER=slurm"], cwd=ROOT, capture_output=True, text=True,
        timeout=60, env=env).stdout.splitlines()[0]


@pytest.mark.integration  # composes the sweep with Hydra's launcher config (seconds)
def test_a_slurm_launcher_off_a_cluster_fails_the_sweeps_preflight(tmp_path, monkeypatch, capsys):
    import importlib

    expand = importlib.import_module("kamera.sweep.expand")  # the module (kamera.sweep.expand is also its function)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    assert expand.main(["--check", "experiment=table3_tiny", "launcher=slurm_h100"]) == 1
    err = capsys.readouterr().err
    assert "- launcher: a Slurm launcher needs sbatch, which is not on PATH here" in err
    assert expand.launcher_problems(["experiment=table3_tiny", "launcher=submitit_local"]) == []
    sbatch = tmp_path / "sbatch"
    sbatch.write_text("#!/bin/sh\n")
    sbatch.chmod(0o755)
    assert expand.launcher_problems(["experiment=table3_tiny", "launcher=slurm_h100"]) == []


def test_a_results_root_that_is_a_file_is_one_line_before_weights_load(tmp_path, monkeypatch):
    root = tmp_path / "results"
    root.write_text("not a folder")
    cfg = job_config(tmp_path, *TINY, f"paths.results={root}")
    assert job.preflight(cfg) == [f"paths.results={root}: {root} is a file, not a folder; point paths.results "
                                  "(KAMERA_RESULTS) at a folder"]
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(JobError, match="is a file, not a folder"):
        runner.run(cfg)


def test_a_read_only_results_root_stops_a_job_with_work_before_weights_load(tmp_path, done_job, monkeypatch):
    """(The real read-only mount was checked by hand: ``mount --bind -o ro``; root passes a mode-0555 folder.)"""
    import os

    from kamera.job import checks

    real = os.access
    ro = tmp_path / "raw"
    monkeypatch.setattr(checks.os, "access", lambda p, mode: False if str(p).startswith(str(ro)) else real(p, mode))
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    more = job_config(tmp_path, "model=tiny_kimi", "bench=synthetic", "arms=[blind,patch_r8]", "n_items=1")
    with pytest.raises(JobError) as err:
        runner.run(more)
    assert str(err.value) == (f"cannot start this job: the results folder {ro / 'adhoc'} is read-only or not writable "
                              "by this user; point paths.results (KAMERA_RESULTS) at a writable folder")
    assert job.preflight(more) == []  # not a preflight problem: a complete job there has nothing to run


# ----- item 12: the shaped writer's --out ------------------------------------------------------------------------
def test_the_shaped_writers_bad_out_is_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """(A full disk mid-write was checked by hand on a 2 MB tmpfs: one line, exit 1, no staging folder left.)"""
    import os

    from kamera.models.shaped import __main__ as writer_cli

    file = tmp_path / "file"
    file.write_text("x")
    ckpt = tmp_path / "Some-Model"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"")
    cases = {
        file: f"--out {file}: {file} is a file, not a folder",
        file / "sub": f"--out {file / 'sub'}: {file} is a file, not a folder",
        ckpt: f"--out {ckpt}: {ckpt} is a checkpoint (config.json and safetensors weights)",
        ckpt / "deeper" / "root": f"--out {ckpt / 'deeper' / 'root'}: {ckpt} is a checkpoint",
    }
    for out, line in cases.items():
        assert writer_cli.out_problem(out).startswith(line), out
    assert writer_cli.main(["llava_1_5_7b", "--out", str(ckpt)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {cases[ckpt]}") and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in ckpt.iterdir()) == ["config.json", "model.safetensors"]  # nothing written
    assert writer_cli.out_problem(tmp_path / "models") is None
    real = os.access
    monkeypatch.setattr(writer_cli.os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real(p, mode))
    assert writer_cli.out_problem(tmp_path / "models") == (f"--out {tmp_path / 'models'}: {tmp_path} is read-only or "
                                                           "not writable by this user")


def test_a_text_only_model_on_a_window_benchmark_of_frames_fails_in_preflight(tmp_path, monkeypatch):
    ckpt = _sharded_checkpoint(tmp_path / "ckpt")  # a qwen2 checkpoint: text-only
    cfg = job_config(tmp_path, "model=hf", f"model.path={ckpt}", "bench=window_synthetic", "arms=[]",
                     "window_probes=[recall]", "n_items=1")
    assert job.preflight(cfg) == ["bench=window_synthetic has video frames in every chunk, but model hf (qwen2) is "
                                  "text-only: run it on a text benchmark, or pick a model that reads images"]
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(JobError, match="is text-only"):
        runner.run(cfg)


# ----- issue 29 item 3: a shard's rows belong to its key ------------------------------------------------------
@pytest.mark.parametrize("table", ["rows", "json"])
def test_a_shard_file_copied_over_another_jobs_is_one_line_naming_both_keys(table, tmp_path, done_job):
    """A parquet (or json) copied over another job's shard was read as that job's: "complete: nothing to run", and in a
    render one model's column vanished while another's n doubled."""
    from kamera.job.store import ShardCorruptError

    _, a = done_job
    other = ("model=tiny_kimi", "bench=synthetic", "arms=[blind]", "n_items=2")
    b = runner.run(job_config(tmp_path, *other))
    suffix = ".parquet" if table == "rows" else ".json"
    shutil.copy(a.with_suffix(suffix), b.with_suffix(suffix))
    with pytest.raises(ShardCorruptError) as err:
        runner.run(job_config(tmp_path, *other))
    line = str(err.value)
    assert "\n" not in line and a.stem in line and b.stem in line, line
    (view,) = sweep_jobs([f"paths.results={tmp_path}/raw", *other])
    assert view.error and a.stem in view.error and b.stem in view.error


# ----- issue 29 item 7: typos that would run something else --------------------------------------------------------
@pytest.mark.parametrize(("override", "named"), [("+arm=[blind]", "arm={'name': 'blind'}: kamera reads no root key "
                                                  "'arm' (did you mean arms?"),  # Hydra loads conf/arm/blind.yaml
                                                 ("+n_item=3", "n_item=3: kamera reads no root key 'n_item' (did you "
                                                  "mean n_items?"),
                                                 ("+foo.bar=1", "foo={'bar': 1}: kamera reads no root key 'foo'")])
def test_a_root_key_kamera_does_not_read_is_refused(override, named, tmp_path, monkeypatch):
    """Hydra's own hint for the typo ``arm=[blind]`` is ``+arm=[blind]``, which ran the default three arms;
    ``+n_item=3`` was accepted and ignored."""
    cfg = job_config(tmp_path, *TINY, override)
    assert [p for p in job.preflight(cfg) if p.startswith(named)], job.preflight(cfg)
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(JobError, match="kamera reads no root key"):
        runner.run(cfg)


def test_every_experiment_and_testbed_composes_without_an_unread_root_key():
    from kamera.job.checks import unread_group_keys, unread_keys

    for kind in ("experiment", "testbed"):
        for name in sorted(p.stem for p in (job_spec.CONF_DIR / kind).glob("*.yaml")):
            cfg = compose_config([f"{kind}={name}"])
            assert unread_keys(cfg) == [] and unread_group_keys(cfg) == [], name


# ----- issue 40 hostile c, d, e: nested keys, '+' on a declared key, absurd counts, the run folder -----------------
@pytest.mark.parametrize(("override", "named"), [
    ("+model.bogus=1", "model.bogus=1: no conf/model/ file has a key 'bogus'"),
    ("+paths.bogus=1", "paths.bogus=1: no conf/paths/ file has a key 'bogus'"),
    ("+model.dtyp=bf16", "model.dtyp='bf16': no conf/model/ file has a key 'dtyp', so no code reads it (did you mean "
                         "model.dtype?)"),
    ("+bench.kwarg={}", "bench.kwarg={}: no conf/bench/ file has a key 'kwarg', so no code reads it (did you mean "
                        "bench.kwargs?)"),
    ("n_items=10000000000000000000000", "n_items=10000000000000000000000: must be an integer from 1 to 10,000,000"),
])
def test_a_nested_key_no_code_reads_and_an_absurd_count_are_refused(override, named, tmp_path, monkeypatch):
    """``+model.bogus=1`` and ``+paths.bogus=1`` passed preflight and were ignored; so did n_items=1e22."""
    cfg = job_config(tmp_path, *TINY, override)
    assert [p for p in job.preflight(cfg) if p.startswith(named)], job.preflight(cfg)
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(JobError, match="cannot start"):
        runner.run(cfg)


def test_a_plus_on_a_key_the_conf_declares_is_refused_by_the_sweep_check(capsys):
    from kamera.job.checks import added_keys_that_exist
    from kamera.sweep.expand import main as sweep_main

    assert added_keys_that_exist(["+arms=[blind]", "+model.dtype=fp32", "+foo=1", "++arms=[blind]", "arms=[x]"]) == [
        "+arms=[blind]: arms is a key kamera's conf/ declares; drop the '+' (arms=[blind]): '+' adds a key no conf/ "
        "file has",
        "+model.dtype=fp32: model.dtype is a key kamera's conf/ declares; drop the '+' (model.dtype=fp32): '+' adds a "
        "key no conf/ file has"]
    assert sweep_main(["--check", *TINY, "+arms=[blind]"]) == 1
    assert "- +arms=[blind]: arms is a key kamera's conf/ declares" in capsys.readouterr().err


def test_a_run_folder_that_cannot_be_made_is_one_line_before_hydra(tmp_path, monkeypatch):
    from kamera.job import checks

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("KAMERA_OUTPUTS", str(tmp_path / "file" / "outputs"))
    assert checks.outputs_problem([]) == (
        f"the run folder root {tmp_path}/file/outputs cannot be made: {tmp_path}/file is a file; point KAMERA_OUTPUTS "
        "(paths.outputs) at a writable folder with free space")
    assert checks.outputs_problem([f"paths.outputs={tmp_path}/ok"]) is None  # the override wins over the env
    assert "is a file" in checks.outputs_problem([f"hydra.run.dir={tmp_path}/file/run"])
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(100, 100, 0))
    assert "on a full disk" in checks.outputs_problem([f"paths.outputs={tmp_path}/ok"])


# ----- issue 29 item 9: operational errors are one line and leave no temp file --------------------------------------
def test_a_full_disk_mid_job_is_one_line_and_leaves_no_temp_file(tmp_path, monkeypatch):
    """``OSError: [Errno 28]`` from the store's append was a traceback and left 0-B ``.tmp`` files (nothing lost)."""
    import errno as errnos

    import pandas as pd

    from kamera.job.store import StoreWriteError

    cfg = job_config(tmp_path, "model=tiny_kimi", "bench=synthetic", "arms=[blind]", "n_items=2")
    real, calls = pd.DataFrame.to_parquet, []

    def full_disk(self, path, *args, **kwargs):
        calls.append(path)
        if len(calls) > 1:  # the first item's rows are written, then the disk is full
            open(path, "wb").close()  # what a full disk leaves: an empty file
            raise OSError(errnos.ENOSPC, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full_disk)
    with pytest.raises(StoreWriteError) as err:
        runner.run(cfg)
    line = str(err.value)
    assert "\n" not in line and "No space left on device" in line and ".parquet" in line, line
    (shard,) = __import__("kamera.job.store", fromlist=["shards"]).shards(tmp_path / "raw", "adhoc")
    assert not list(shard.dir.glob(".*.tmp")), list(shard.dir.iterdir())
    monkeypatch.undo()
    assert len(shard.rows()) == 1  # the first item's row is kept; the rerun continues
    runner.run(cfg)
    assert len(shard.rows()) == 2


def test_a_full_disk_writing_the_json_is_one_line_and_leaves_no_temp_file(tmp_path, monkeypatch):
    import errno as errnos
    from pathlib import Path

    from kamera.job.store import StoreWriteError, atomic_write_text

    def full_disk(self, text, *args, **kwargs):
        open(self, "w").close()
        raise OSError(errnos.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(StoreWriteError, match=r"No space left on device"):
        atomic_write_text(tmp_path / "x.json", "{}")
    assert list(tmp_path.iterdir()) == []


def test_a_terminated_render_leaves_no_hidden_temp_file(tmp_path, monkeypatch):
    """Killed renders left hidden ``.pdf.tmp`` files: SIGTERM (a kill, a Slurm timeout) ends the process through
    its cleanup instead of around it."""
    import os
    import signal

    from experiments.common import save_figure
    from kamera.run.signals import terminate_as_exit

    def killed(self, fname, *args, **kwargs):
        open(fname, "wb").write(b"%PDF half")
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", killed)
    with pytest.raises(SystemExit), terminate_as_exit():
        save_figure(plt.figure(), tmp_path / "fig5")
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # restored


@pytest.mark.parametrize("where", ["file", "under a file"])
def test_rehearse_with_an_out_that_is_a_file_is_one_line(where, tmp_path, capsys):
    """Issue 29 item 9: ``make rehearse REHEARSE_DIR=<a file>`` was a FileExistsError traceback."""
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    out = target if where == "file" else target / "rehearse"
    assert rehearse.main(["--out", str(out), "--experiments", "table3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"error: --out {out} (REHEARSE_DIR):") and f"{target} is a file" in err
    assert target.read_text() == "mine"
