"""Helpers of the pipeline tests: compose a job as the CLI would, run the CLI, read a shard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from kamera.job.store import shards
from kamera.sweep import compose_config

ROOT = Path(__file__).resolve().parents[2]


def job_config(tmp_path: Path, *overrides: str):
    """A job's config with its results and outputs under ``tmp_path``."""
    return compose_config([f"paths.results={tmp_path}/raw", f"paths.outputs={tmp_path}/out", *overrides])


def env(**extra: str) -> dict:
    return {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}


def cli(tmp_path: Path, *overrides: str, multirun: bool = False, cwd: Path = ROOT, **popen) -> subprocess.Popen:
    """``python -m kamera.run`` (results under ``tmp_path``), stdout and stderr together."""
    cmd = [sys.executable, "-m", "kamera.run", *(["-m"] if multirun else []),
           f"paths.results={tmp_path}/raw", f"paths.outputs={tmp_path}/out", *overrides]
    return subprocess.Popen(cmd, cwd=cwd, env=popen.pop("env", env()), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **popen)


def finish(proc: subprocess.Popen, timeout: int = 300, rc: int = 0) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == rc, out[-3000:]
    return out


def all_rows(root: Path, group: str = "adhoc") -> pd.DataFrame:
    """Every row of every shard of a group."""
    frames = [s.rows() for s in shards(root, group)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
