"""Renderers read where the runner writes, and ``kamera.sweep.status`` shows how far a sweep is (issue 9,
failures 7 and 9): on main the renderer read ``results/raw`` under the package, so
``make table3 ARGS='paths.results=X'`` or another working directory rendered old or no rows."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pipeline_support import ROOT, env, job_config

from experiments import fig5
from kamera.run import runner
from kamera.sweep import status

SMOKE = ("experiment=table3_tiny", "testbed=tiny_llava", "n_items=1", "arms=[reprefill,blind]")


@pytest.mark.integration
def test_render_reads_the_sweeps_results_root_from_any_working_directory(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    sweep = [sys.executable, "-m", "kamera.run", "-m", *SMOKE]
    out = subprocess.run(sweep, cwd=work, env=env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert list((work / "results" / "raw" / "table3_tiny").glob("*.parquet"))  # relative to the working directory
    render = subprocess.run([sys.executable, "-m", "experiments.common", *SMOKE], cwd=work, env=env(),
                            capture_output=True, text=True, timeout=300)
    assert render.returncode == 0, render.stdout[-2000:] + render.stderr[-2000:]
    md = (work / "results" / "tables" / "table3_tiny.md").read_text()
    assert "0.25 / 1" in md and "rows: 1 job(s)" in md

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # another working directory: KAMERA_RESULTS or paths.results point back
    monkeypatch.setenv("KAMERA_RESULTS", str(work / "results" / "raw"))
    from experiments import table3

    table3.main([*SMOKE, "--out", str(tmp_path / "env")])
    monkeypatch.delenv("KAMERA_RESULTS")
    table3.main([*SMOKE, f"paths.results={work}/results/raw", "--out", str(tmp_path / "override")])
    assert (tmp_path / "env.md").read_text() == (tmp_path / "override.md").read_text() == md
    capsys.readouterr()


def test_status_lists_done_partial_and_missing_jobs(tmp_path, capsys):
    base = (f"paths.results={tmp_path}/raw", "experiment=table3_tiny", "n_items=1", "arms=[blind]")
    runner.run(job_config(tmp_path, *base, "testbed=tiny_llava"))
    assert status.main([*base, "testbed=tiny_llava,tiny_kimi"]) == 0
    out = capsys.readouterr().out
    assert "table3_tiny: 1/2 job(s) done" in out
    assert "done 1/1" in out and "missing" in out and str(tmp_path / "raw" / "table3_tiny") in out
    status.main([*base[:3], "arms=[blind,patch_r8]", "testbed=tiny_llava"])  # a new arm: the job is partial
    out = capsys.readouterr().out
    assert "partial 0/1" in out and "1 item(s) with arms or probes still to run" in out


def test_fig5_renders_from_a_sweep_with_effective_ranks(tmp_path, capsys):
    job = ("experiment=fig5_tiny", "testbed=tiny_kimi", "n_items=1", "arms=[blind,patch_r1,patch_r128,patch_full]")
    runner.run(job_config(tmp_path, *job))
    fig5.main([*job, f"paths.results={tmp_path}/raw", "--out", str(tmp_path / "f5")])
    md = (tmp_path / "f5.md").read_text()
    assert "m_eff" in md and "rows: 1 job(s)" in md
    for suffix in (".pdf", ".png"):
        assert (tmp_path / f"f5{suffix}").stat().st_size > 0
    capsys.readouterr()


@pytest.mark.integration
def test_make_render_and_status_are_targets(tmp_path):
    """``make render EXP=…`` renders only (no sweep) and ``make status`` lists jobs; both from stored rows."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # also under make test

    def dry(*args: str) -> str:
        return subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, env=env).stdout

    out = dry("render", "EXP=table3_tiny", "PARTIAL=1")
    assert out.strip().endswith("-m experiments.common experiment=table3_tiny  --allow-partial")
    assert "kamera.run" not in out
    out = dry("status", "EXP=fig5")
    assert "-m kamera.sweep.status experiment=fig5" in out


@pytest.mark.integration
@pytest.mark.parametrize("scale", ["Paper", "full", ""])
def test_make_refuses_a_scale_other_than_tiny_or_paper(scale):
    """Issue 29 item 7: ``make table3 SCALE=Paper`` ran the tiny sweep (any value but ``paper`` was tiny)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(["make", "--no-print-directory", "-n", "table3", f"SCALE={scale}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0 and f"SCALE={scale}: must be tiny or paper" in out.stderr and not out.stdout


@pytest.mark.integration
def test_a_failed_manifest_leaves_no_temp_file():
    """Issue 29 item 9: ``make manifest EXP=nope`` left an empty ``SLURM/manifests/nope.txt.tmp``."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(["make", "--no-print-directory", "manifest", "EXP=nope_no_such_experiment",
                          f"PYTHON={sys.executable}"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode != 0
    assert not list((ROOT / "SLURM" / "manifests").glob("nope_no_such_experiment*")), out.stderr[-2000:]
