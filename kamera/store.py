"""The results store: one parquet shard per result-defining config, rows keyed by (item, arm).

    results/raw/<experiment>/<config hash>.parquet     rows of finished items (rewritten atomically)
    results/raw/<experiment>/<config hash>.json        the resolved config that made them
    results/raw/<experiment>/.<config hash>.lock       held while a job writes the shard

The hash covers only what changes the numbers (model, dtype, benchmark selection, arms and their
knobs, seed, …), never operational keys (device, paths, logging, tracking), so the same sweep from
a laptop, a Hydra multirun or a plain sbatch array lands in the same shard and is never run twice.
A shard only ever holds whole items: it is rewritten to a dot-named temp file and ``os.replace``d
after each item, so a kill at any moment loses at most the item in flight and never duplicates a row.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd


def config_hash(result_config: dict) -> str:
    """sha256 (12 hex chars) of the canonical JSON of the result-defining config."""
    blob = json.dumps(result_config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


class ShardLockedError(RuntimeError):
    """Another job is writing the same shard (the same config launched twice)."""


class Shard:
    """The rows of one config hash under ``root/<experiment>/``."""

    def __init__(self, root: str | Path, experiment: str, digest: str) -> None:
        self.dir = Path(root) / experiment
        self.digest = digest
        self.path = self.dir / f"{digest}.parquet"
        self.config_path = self.dir / f"{digest}.json"
        self._tmp = self.dir / f".{digest}.parquet.tmp"
        self._lock = self.dir / f".{digest}.lock"

    def read(self) -> pd.DataFrame:
        """Rows written so far (empty frame if none)."""
        return pd.read_parquet(self.path) if self.path.exists() else pd.DataFrame()

    def done_items(self) -> set[str]:
        rows = self.read()
        return set(rows["item_id"].astype(str)) if len(rows) else set()

    def write_config(self, resolved: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.config_path, json.dumps(resolved, indent=2, sort_keys=True, default=str))

    def mark_complete(self, n_items: int, refusals: list[dict] | None = None) -> None:
        """Record that every selected item is in the shard (a rerun then skips the job without loading),
        with the arms that refused the family or some items, and why."""
        meta = json.loads(self.config_path.read_text())
        meta["complete"] = {"n_items": n_items, "n_rows": len(self.read()), "refusals": refusals or []}
        atomic_write_text(self.config_path, json.dumps(meta, indent=2, sort_keys=True, default=str))

    def is_complete(self) -> bool:
        if not (self.config_path.exists() and self.path.exists()):
            return False
        return "complete" in json.loads(self.config_path.read_text())

    def append(self, rows: list[dict]) -> int:
        """Add one item's rows (all arms) atomically; returns the shard's row count."""
        new = pd.DataFrame(rows)
        old = self.read()
        if len(old) and set(new["item_id"].astype(str)) & set(old["item_id"].astype(str)):
            raise ValueError(f"item already in shard {self.path}: refusing to duplicate rows")
        frame = pd.concat([old, new], ignore_index=True) if len(old) else new
        self.dir.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(self._tmp, index=False)
        os.replace(self._tmp, self.path)
        return len(frame)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive ownership of the shard for one job (a second concurrent job fails fast)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self._lock, "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ShardLockedError(
                    f"{self.path} is being written by another job (same config hash {self.digest}); "
                    "wait for it or kill it"
                ) from None
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` via a dot-named temp file and ``os.replace`` (readers never see half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def load_rows(root: str | Path, experiment: str | None = None) -> pd.DataFrame:
    """All finished rows under ``root`` (or one experiment), concatenated (dot files ignored)."""
    base = Path(root) if experiment is None else Path(root) / experiment
    files = sorted(p for p in base.rglob("*.parquet") if not p.name.startswith("."))
    frames = [pd.read_parquet(p) for p in files]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
