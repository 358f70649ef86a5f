"""Provenance on the bottom floor: what made a record, for every layer to stamp it with (nothing of kamera above
:mod:`kamera.env` imported here).

:func:`digest` keys jobs, knobs and data by the canonical JSON of what defines them; :func:`now` is the timestamp
shards record; :func:`code_version` is the checkout's commit, its dirty flag and the package versions;
:func:`kamera.job.store.provenance` adds where a run computes (device, dtype, kernels, host, Slurm ids). Job
identity, the store, the runner, the renderers and the engine's fair clock read them from here.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path


def digest(obj: object) -> str:
    """sha256 (12 hex chars) of the canonical JSON of ``obj``."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def now() -> str:
    """The current UTC time, ISO 8601 to the microsecond (what shards record): "the most recently run" shard is
    chosen by it, and two jobs run within one second (a fast machine) tied at second resolution."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


CODE_PATHS = (":/kamera", ":/conf", ":/experiments", ":/pyproject.toml")  # what the dirty flag covers


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent, capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version() -> dict:
    """The git commit of the kamera checkout, a dirty flag (tracked code or config changed since it; the
    committed demo outputs do not count) and the package versions."""
    from importlib.metadata import PackageNotFoundError, version

    import torch
    import transformers

    try:
        kamera_version = version("kamera")
    except PackageNotFoundError:
        kamera_version = "not installed"
    commit = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    return {
        "commit": commit or "unknown (not a git checkout)",
        "dirty": bool(dirty) if dirty is not None else None,
        "kamera": kamera_version,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
