"""The results store: one shard per job identity; rows keyed by (item, arm), probe records by (item, probe).

    <root>/<group>/<job key>.parquet          rows, one per (item, arm label + knobs)
    <root>/<group>/<job key>.probes.parquet   probe records (long format), keyed by (item, probe label + knobs)
    <root>/<group>/<job key>.json             the job's identity, its selection (and what was skipped, why),
                                              failed items, arm refusals and the provenance of every run
    <root>/<group>/.<job key>.lock            held while a job writes the shard

A job key is the digest of the job's identity (:mod:`kamera.job`): the config keys that define its
numbers, a fingerprint of the checkpoint loaded and one of the data read (annotation files and the
selected item ids). Arms and probes are not part of it: a shard collects every arm ever run on the
job's items, and a run computes only the (item, arm) pairs it does not hold yet **at the current code
version**: every record (row, probe record, refusal, empty probe) is stamped with the ``version`` of the
plugin that made it and the row metrics' ``metrics_version`` (:data:`STAMP`) and the index of the run that
wrote it (``run_index``); a record whose stamp is not the one the job asks for, or written before the run
that a ``force=true`` started (``force_from`` in the json), is stale: the job recomputes it, and the item's
new records replace it atomically (a record without a stamp, written before versions existed, is version 1
of both, run 0).

Each table is rewritten to a dot-named temp file and ``os.replace``d after each item, so a kill at
any moment loses at most the item in flight and never leaves half a row. A file that does not read
back (a truncated copy, a full disk) is reported with its path and what to do
(:class:`ShardCorruptError`), never silently read as empty.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import logging
import os
import platform
import re
import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from kamera.provenance import code_version, now

log = logging.getLogger("kamera.store")

TABLES = {"rows": "arm", "probes": "probe"}  # table → the column naming the plugin that made a record
STAMP = ("version", "metrics_version")  # the code versions every record carries (absent: version 1 of each)
RUN = "run_index"  # the index in the json's ``runs`` of the run that wrote a record (absent: 0)
SOURCE = "source_digest"  # a digest of the plugin's source that made a record (kamera.job.spec.source_digest)


def _move_aside(path: Path) -> str:
    return f"move it aside (mv {path} {path}.bad) and rerun the job, which recomputes what it held"


class ShardLockedError(RuntimeError):
    """Another job is writing the same shard (the same job launched twice)."""


class ShardCorruptError(RuntimeError):
    """A shard file does not read back; the message names the file and what to do."""


class StoreWriteError(OSError):
    """A file could not be written (a full disk, a read-only or vanished folder): one line naming it; what was stored
    before is intact. An OSError, so every handler of one still catches it."""


@contextmanager
def staged(path: Path) -> Iterator[Path]:
    """A dot-named temp file beside ``path`` to write, ``os.replace``d onto it when the block ends, so readers never
    see half a file. A failure (a full disk, an interrupt, a SIGTERM that reaches Python) removes the temp file instead
    of leaving it; an OSError is re-raised as :class:`StoreWriteError` naming ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, StoreWriteError):
            raise StoreWriteError(err.errno, f"cannot write {path}: {err.strerror or err}; what was stored before is "
                                  "intact: free space (or fix the folder) and rerun to continue") from None
        raise


Stamp = tuple[int, ...]  # one value per :data:`STAMP` column


@dataclass(frozen=True)
class Expected:
    """What a job asks of each item: (label, knobs key, stamp) per arm and per probe; the stamp is the
    versions (:data:`STAMP`) of the code that computes it now."""

    arms: tuple[tuple[str, str, Stamp], ...]
    probes: tuple[tuple[str, str, Stamp], ...] = ()


def stamp_of(record: dict) -> Stamp:
    """A stored record's stamp (each :data:`STAMP` value, 1 where it has none: written before versions existed)."""
    return tuple(_int(record.get(c), 1) for c in STAMP)


def _int(value: object, default: int) -> int:
    return default if value is None or value != value else int(value)  # None or NaN (a column older rows lack)


def current(record: dict, stamp: Stamp, force_from: int) -> bool:
    """Whether a stored record is what the code asks for now: its stamp is ``stamp`` and it was written by run
    ``force_from`` or later (a ``force=true`` run's index; 0 when none was forced)."""
    return stamp_of(record) == stamp and _int(record.get(RUN), 0) >= force_from


@dataclass
class JobState:
    """How far a job has got, from its shard alone (no data, no model).

    ``status``: ``missing`` (no shard), ``done`` (complete), ``partial`` (a rerun continues it),
    ``failed`` (nothing left to compute, yet not complete: the data had defects or no item was
    usable; repairing the data makes it a new job). ``k`` of ``n`` selected items are finished
    (rows for every arm and probe, or a recorded reason).
    """

    status: str
    n: int = 0
    k: int = 0
    n_requested: int | None = None
    failed: dict[str, str] = field(default_factory=dict)
    defects: list[dict] = field(default_factory=list)
    todo: dict[str, list[str]] = field(default_factory=dict)  # item → labels still to compute

    stale: dict[str, set[Stamp]] = field(default_factory=dict)  # label → stamps of its stored records out of date
    newer: set[str] = field(default_factory=set)  # labels of ``stale`` with records of a newer code version

    @property
    def complete(self) -> bool:
        return self.status == "done"

    def summary(self) -> str:
        """One line: status, k / n, failures and data defects (counts; ``reasons()`` lists them)."""
        if self.status == "missing":
            return "missing"
        parts = [f"{self.status} {self.k}/{self.n}"]
        if self.n_requested is not None and self.n < self.n_requested:
            parts.append(f"({self.n} of the {self.n_requested} items requested could be selected)")
        if self.failed:
            parts.append(f"{len(self.failed)} item(s) failed")
        if self.defects:
            parts.append(f"{len(self.defects)} data defect(s)")
        if self.status == "failed" and self.k == self.n and not self.defects:
            parts.append("no usable item")
        older = sorted(set(self.stale) - self.newer)
        if older:
            parts.append(f"stale rows of {', '.join(older)} (older code version or force=true)")
        if self.newer:
            parts.append(f"rows of {', '.join(sorted(self.newer))} from newer code (recomputed at this checkout's "
                         "version, or update the checkout)")
        return ", ".join(parts)

    def reasons(self) -> list[str]:
        """Every failed item and data defect with its reason, one line each."""
        return [f"item {i} failed: {r}" for i, r in sorted(self.failed.items())] + [
            f"data defect, {d['item_id']} ({d['stage']}): {d['reason']}" for d in self.defects
        ]


def results_root(cfg: DictConfig) -> Path:
    """Where shards go: paths.results (KAMERA_RESULTS, else results/raw), relative to the working directory."""
    return Path(os.path.expanduser(cfg.paths.results))


class Shard:
    """The stored results of one job under ``root/<group>/`` (:func:`results_root`)."""

    def __init__(self, root: str | Path, group: str, key: str) -> None:
        self.dir = Path(root) / group
        self.key = key
        self.path = self.dir / f"{key}.parquet"
        self.probes_path = self.dir / f"{key}.probes.parquet"
        self.meta_path = self.dir / f"{key}.json"
        self._lock = self.dir / f".{key}.lock"

    def __repr__(self) -> str:
        return f"Shard({self.meta_path.with_suffix('')})"

    # ----- reading -----------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.meta_path.exists()

    def meta(self) -> dict:
        """The shard's json (identity, selection, failures, refusals, runs); {} if none yet."""
        if not self.meta_path.exists():
            return {}
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError) as err:
            raise ShardCorruptError(
                f"{self.meta_path} does not read back ({type(err).__name__}: {err}); delete it and rerun the job: "
                "the run rewrites it and keeps the rows already stored"
            ) from None
        if isinstance(meta, dict) and meta.get("key") not in (None, self.key):
            raise ShardCorruptError(f"{self.meta_path} is the record of job {meta['key']}, not of job {self.key} whose "
                                    "name it has (a file copied or renamed over another job's); "
                                    f"{_move_aside(self.meta_path)}")
        return meta

    def table(self, name: str) -> pd.DataFrame:
        """The ``rows`` or ``probes`` table (empty frame if none yet)."""
        path = self.path if name == "rows" else self.probes_path
        if not path.exists():
            return pd.DataFrame()
        try:
            frame = pd.read_parquet(path)
        except Exception as err:  # pyarrow raises several types for a truncated or foreign file
            raise ShardCorruptError(
                f"{path} does not read back ({type(err).__name__}: {err}); move it aside "
                f"(mv {path} {path}.bad) and rerun the job, which recomputes the items it held"
            ) from None
        self._owns(path, frame)
        return frame

    def _owns(self, path: Path, frame: pd.DataFrame) -> None:
        """ShardCorruptError (one line naming both) when a table's records name another job key or config key than
        this shard's (its name, its json's ``config_key``): a file copied or renamed over another job's."""
        if frame.empty:
            return
        for column, mine in (("job_key", self.key), ("config_key", self.meta().get("config_key"))):
            other = sorted(set(frame[column].astype(str)) - {mine}) if mine and column in frame else []
            if other:
                raise ShardCorruptError(f"{path} holds records of {column} {other[0]}, not of this shard's {mine} "
                                        f"(a file copied or renamed over another job's); {_move_aside(path)}")

    def rows(self) -> pd.DataFrame:
        return self.table("rows")

    def probes(self) -> pd.DataFrame:
        return self.table("probes")

    def check(self) -> None:
        """Read every file of the shard; ShardCorruptError naming the first that does not read back."""
        self.meta()
        for name in TABLES:
            self.table(name)

    def stored(self, name: str) -> list[tuple[tuple[str, str, str], dict]]:
        """Each record of a table as ((item_id, label, knobs), its :data:`STAMP` and :data:`RUN` values)."""
        frame = self.table(name)
        if frame.empty:
            return []
        keys = frame[["item_id", TABLES[name], "knobs"]].astype(str).itertuples(index=False, name=None)
        stamps = frame.reindex(columns=[*STAMP, RUN]).to_dict("records")
        return list(zip(keys, stamps, strict=True))

    # ----- writing (inside ``locked()``) --------------------------------------------------------
    def write_meta(self, meta: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.meta_path, json.dumps(meta, indent=1, sort_keys=True, default=str))

    def update_meta(self, change: Callable[[dict], None]) -> dict:
        meta = self.meta()
        change(meta)
        self.write_meta(meta)
        return meta

    def append(self, name: str, records: list[dict], replace: Iterable[tuple[str, str, str]] = ()) -> int:
        """Add one item's records to a table atomically, dropping the stored records of every (item, label, knobs)
        in ``replace`` (stale ones the item's new records supersede) in the same write; refuses any other
        (item, label, knobs) already stored."""
        replace = set(replace)
        old = self.table(name)
        cols = ["item_id", TABLES[name], "knobs"]
        keep = [k not in replace for k in old[cols].astype(str).itertuples(index=False, name=None)] if len(old) else []
        if not records and all(keep):
            return len(old)
        old, new = old[keep] if len(old) else old, pd.DataFrame(records)
        if len(old) and len(new):
            keys = [set(f[cols].astype(str).itertuples(index=False, name=None)) for f in (new, old)]
            clash = keys[0] & keys[1]
            if clash:
                raise ValueError(f"{sorted(clash)[:3]} already in {self.dir / self.key}: refusing to duplicate")
        frame = pd.concat([old, new], ignore_index=True) if len(old) and len(new) else new if len(new) else old
        path = self.path if name == "rows" else self.probes_path
        self.dir.mkdir(parents=True, exist_ok=True)
        with staged(path) as tmp:
            frame.to_parquet(tmp, index=False)
        return len(frame)

    @contextmanager
    def locked(self, required: bool = True) -> Iterator[bool]:
        """Exclusive ownership of the shard for one job: a second concurrent job fails fast
        (:class:`ShardLockedError`), or, with ``required=False``, is told so (yields False)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self._lock, "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not required:
                    yield False
                    return
                raise ShardLockedError(
                    f"{self.path} is being written by another job (same job key {self.key}); wait for it or kill it"
                ) from None
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # ----- state -------------------------------------------------------------------------------
    def state(self, expected: Expected, retry_failed: bool = False) -> JobState:
        """How far the job is for these arms and probes at their current versions (see :class:`JobState`); a
        record of another stamp, or older than a forced run, does not count (its label is in ``stale``)."""
        meta = self.meta()
        if not meta:
            return JobState("missing")
        selection = meta.get("selection", {})
        items = [str(i) for i in selection.get("item_ids", [])]
        failed = {} if retry_failed else dict(meta.get("failed", {}))
        force_from = _int(meta.get("force_from"), 0)
        want = {(a, k): st for a, k, st in (*expected.arms, *expected.probes)}
        want_stamp = {a: st for (a, _), st in want.items()}
        stale: dict[str, set[Stamp]] = {}

        def fresh(records: Iterable[tuple[tuple, dict]]) -> set:
            keep = set()
            for key, rec in records:
                if key[1:] not in want:
                    continue  # another arm or knobs than this job asks for: not its concern
                if current(rec, want[key[1:]], force_from):
                    keep.add(key)
                else:
                    stale.setdefault(key[1], set()).add(stamp_of(rec))
            return keep

        refused = fresh(((r.get("item_id"), r["arm"], r["knobs"]), r) for r in meta.get("refusals", []))
        family = {(a, k) for i, a, k in refused if i is None}
        have = {
            "rows": fresh(self.stored("rows")) | {(i, a, k) for i, a, k in refused if i is not None},
            "probes": fresh(self.stored("probes")) | fresh(empty_probe(p) for p in meta.get("empty_probes", [])),
        }
        todo: dict[str, list[str]] = {}
        for item in items:
            if item in failed:
                continue
            left = [a for a, k, _ in expected.arms if (a, k) not in family and (item, a, k) not in have["rows"]]
            left += [p for p, k, _ in expected.probes if (item, p, k) not in have["probes"]]
            if left:
                todo[item] = left
        stale = {label: st for label, st in stale.items() if any(label in left for left in todo.values())}
        newer = {label for label, st in stale.items() for stamp in st
                 if any(a > b for a, b in zip(stamp, want_stamp[label], strict=True))}
        defects = [s for s in selection.get("skipped", []) if s.get("stage") in ("row", "build")]
        k = len(items) - len(todo)
        usable = k - sum(1 for i in items if i in failed)
        if todo:
            status = "partial"
        elif defects or usable == 0:
            status = "failed"
        else:
            status = "done"
        return JobState(status, len(items), k, selection.get("n_requested"), failed, defects, todo, stale, newer)


def empty_probe(entry: list | dict) -> tuple[tuple[str, str, str], dict]:
    """An ``empty_probes`` entry of the json as ((item, probe, knobs), its stamp): a dict with ``item_id``,
    ``probe``, ``knobs`` and the stamp, or (written before versions existed) a list [item, probe, knobs]."""
    if isinstance(entry, dict):
        return (str(entry["item_id"]), entry["probe"], entry["knobs"]), entry
    return (str(entry[0]), entry[1], entry[2]), {}


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` through :func:`staged` (readers never see half a file; a failure leaves no temp file)."""
    with staged(path) as tmp:
        tmp.write_text(text)


def shards(root: str | Path, group: str) -> list[Shard]:
    """Every shard under ``root/<group>`` (by its json)."""
    base = Path(root) / group
    if not base.is_dir():
        return []
    return [Shard(root, group, p.stem) for p in sorted(base.glob("*.json")) if not p.name.startswith(".")]


JOB_KEY = re.compile(r"[0-9a-f]{12}")  # how :func:`digest` names a shard
_warned: set[tuple[Path, str]] = set()


def _foreign(path: Path, why: str) -> None:
    """Warn once per process about a file of a group folder a job skips (not a shard, or not its shard)."""
    if (path, why) not in _warned:
        _warned.add((path, why))
        log.warning("warning: skipping %s: %s", path, why)


def recorded_config(shard: Shard) -> str | None:
    """The config key a shard's files name, without trusting its json: the one its rows (or probe records) carry,
    else its json's ``config_key``; None when no file says (not a shard, or nothing readable)."""
    for path in (shard.path, shard.probes_path):
        try:
            keys = set(pd.read_parquet(path, columns=["config_key"])["config_key"].astype(str))
        except Exception:  # no file, not parquet, no such column: it does not say
            continue
        if len(keys) == 1:
            return keys.pop()
    try:
        meta = json.loads(shard.meta_path.read_text())
    except (OSError, ValueError):
        return None
    return meta.get("config_key") if isinstance(meta, dict) and isinstance(meta.get("config_key"), str) else None


def latest(found: Iterable[Shard], **match: str) -> list[Shard]:
    """The shards whose json has every ``match`` key equal, most recently run first.

    A JSON file of the group folder that is not a shard's (not named by a job key, or not a shard's record) is
    skipped with a warning naming it. One named by a job key that does not read back is a corrupt shard: an
    error (:class:`ShardCorruptError` naming it) for the job whose config it holds (its rows name the
    ``config_key`` asked for, or none is asked), else skipped with a warning naming it: a corrupt file of
    another job, or of no job, blocks no other job."""
    hits = []
    for s in found:
        try:
            meta = s.meta()
        except ShardCorruptError:
            owner = recorded_config(s)
            if JOB_KEY.fullmatch(s.key) and ("config_key" not in match or owner == match["config_key"]):
                raise
            whose = "no file beside it names a job's config" if owner is None else f"its rows are config {owner}'s"
            _foreign(s.meta_path, f"it does not read back as a kamera shard's json, and {whose} (not this job's)")
            continue
        if not isinstance(meta, dict) or "config_key" not in meta:
            _foreign(s.meta_path, "it has no config_key, not a kamera shard")
            continue
        hits.append((meta, s))
    hits = [(m, s) for m, s in hits if all(m.get(k) == v for k, v in match.items())]
    return [s for m, s in sorted(hits, key=lambda ms: ms[0].get("last_run", ""), reverse=True)]


def provenance(device: str, dtype: str, attention: str) -> dict:
    """Where and with what a run computes: code version, device name, dtype, attention kernel, the CPU kernel facts
    that change float rounding (:func:`kamera.env.kernel_facts`), host, Slurm ids."""
    import torch

    from kamera.env import kernel_facts

    if device == "auto":  # a model spread over every visible GPU (device_map="auto")
        name = " + ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    elif device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        name = f"cpu ({platform.machine()}, {torch.get_num_threads()} thread(s))"
    slurm = {k: os.environ[k] for k in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID") if k in os.environ}
    return {
        **code_version(), "device": device, "device_name": name, "dtype": dtype, "attention": attention,
        "kernels": kernel_facts(), "hostname": socket.gethostname(), "user": getpass.getuser(), "slurm": slurm,
        "start": now(),
    }
