"""``python -m kamera.sweep.status [experiment=X] [overrides…]`` (``make status``): how far every job of a sweep is.

    python -m kamera.sweep.status                                  # every experiment in conf/experiment
    python -m kamera.sweep.status experiment=table3 n_items=16     # one sweep, with the overrides it ran with

Each job of the sweep (Hydra's own expansion, :func:`kamera.sweep.expand`) is found in the results
root the runner resolves (``paths.results``: KAMERA_RESULTS, else ``results/raw`` under the working
directory) by its config key, and shown as ``done k/n``, ``partial k/n``, ``failed k/n`` or
``missing``, with every failed item's and data defect's reason. Several shards may hold the same
config (another checkpoint directory or data copy): the job's is the one whose recorded identity is what
the overrides name (:func:`names_this`: the checkpoint fingerprint the model resolves to and the data root
they resolve to), however recently the others ran; only when that copy has no shard of its own, the most
recent shard of a copy whose annotation files are byte-identical there, and the job's lines say which it
read. The others are listed as superseded and never read. Renderers read jobs through
:func:`sweep_jobs` too, so a table shows exactly what this lists.

An experiment config may carry a ``cost:`` block (the tokens per item it assumes); its estimated
H100-hours are then shown per job through ``kamera.sweep.cost`` (omitted when it has none; a job the block
does not cover, e.g. an overridden benchmark, says so in a note). A file of the group folder that is not a
shard (another tool's JSON) is skipped with a warning naming it (:func:`kamera.job.store.latest`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from kamera.job import (
    CONF_DIR,
    Spec,
    bench_root,
    checkpoint_fingerprint,
    config_key,
    expected_of,
    file_digest,
    job_specs,
    results_root,
)
from kamera.job.rows import lacking_columns
from kamera.job.store import JobState, Shard, ShardCorruptError, latest, shards
from kamera.sweep.cost import h100_hours, not_estimated
from kamera.sweep.expand import SweepError, composed


@dataclass
class JobView:
    """One job of a sweep as the store holds it."""

    overrides: list[str]
    cfg: DictConfig
    key: str  # the job's config key
    arms: list[Spec]
    probes: list[Spec]
    shard: Shard | None = None
    state: JobState = field(default_factory=lambda: JobState("missing"))
    superseded: list[Shard] = field(default_factory=list)
    error: str | None = None  # a shard file that does not read back
    stand_in: Path | None = None  # the data copy the overrides name when it has no shard and another copy's is read

    @property
    def name(self) -> str:
        return f"{self.cfg.model.name} · {self.cfg.bench.name}" + (
            f" ({self.cfg.bench.subset})" if self.cfg.bench.subset else "")

    def rows(self) -> pd.DataFrame:
        """This job's rows for exactly its arms (label and knobs), one per (item, arm); ShardCorruptError naming the
        shard when its rows lack a column this code writes (rows of older code; a missing version stamp is
        version 1 and missing per-sample log columns are null, not errors)."""
        frame = self._records("rows", "arm", self.arms)
        if why := lacking_columns(self.shard.path if self.shard else None, frame):
            raise ShardCorruptError(why)
        return frame

    def probe_records(self) -> pd.DataFrame:
        """This job's probe records for exactly its probes."""
        return self._records("probes", "probe", self.probes)

    def _records(self, table: str, column: str, specs: list[Spec]) -> pd.DataFrame:
        if self.shard is None:
            return pd.DataFrame()
        frame = self.shard.table(table)
        if frame.empty:
            return frame
        wanted = {(s.label, s.key) for s in specs}
        keep = [(a, k) in wanted for a, k in zip(frame[column], frame["knobs"], strict=True)]
        return frame[keep]


def _data_root(cfg: DictConfig) -> Path | None:
    """The data root a job's overrides resolve to (bench.root, else <paths.data>/<its directory>); None for a
    benchmark without files (synthetic, the toy task, window benchmarks)."""
    from kamera.data import get_benchmark
    from kamera.data.registry import default_root

    try:
        spec = get_benchmark(cfg.bench.name)
    except (KeyError, ValueError):
        return None
    return default_root(spec, bench_root(cfg, spec.dir_name)) if spec.dir_name else None


def _same_path(a: str | Path | None, b: str | Path | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return os.path.realpath(os.path.expanduser(str(a))) == os.path.realpath(os.path.expanduser(str(b)))


OWN, ALIKE = 2, 1  # how a shard's recorded data copy matches the one a job's overrides name (:func:`names_this`)


def names_this(meta: dict, checkpoint: str | None, root: Path | None) -> int:
    """How well a shard's recorded identity is the checkpoint and data copy a job's overrides name, without loading
    weights or reading the benchmark: 0 when its checkpoint fingerprint is not ``checkpoint`` (what the model
    resolves to: cheap, the weights' digests are recorded, :func:`kamera.job.identity.weights_sha256`; None when it
    cannot be computed, e.g. a checkpoint directory not mounted here, and then not compared); :data:`OWN` when its
    data root is ``root`` (the copy's own shard); :data:`ALIKE` when every annotation file it recorded is
    byte-identical under ``root`` (another copy with the same annotations; its media are not re-hashed here, so
    it is read only when the named copy has no shard of its own, and then said so); else 0."""
    ident = meta.get("identity") or {}
    if checkpoint is not None and ident.get("checkpoint") != checkpoint:
        return 0
    recorded = (meta.get("selection") or {}).get("root")
    if _same_path(recorded, root):
        return OWN
    files = (ident.get("data") or {}).get("files") or {}
    if root is None or not files:
        return 0
    try:
        return ALIKE if all(file_digest(Path(root) / rel) == sha for rel, sha in files.items()) else 0
    except OSError:
        return 0


def sweep_jobs(overrides: list[str]) -> list[JobView]:
    """Every job of the sweep ``overrides`` describes, with its shard and state: the named data copy's own shard
    (:data:`OWN`; the most recently run if several), else the most recent shard of a copy with byte-identical
    annotation files (:data:`ALIKE`; :attr:`JobView.stand_in` is then the named copy), else none."""
    views = []
    for job, cfg in composed(overrides):
        arms, probes = job_specs(cfg)  # a window job's window probes stand where an arm job's arms do
        view = JobView(job, cfg, config_key(cfg), arms, probes)
        try:
            found = latest(shards(results_root(cfg), cfg.group), config_key=view.key)
            if found:
                try:
                    checkpoint = checkpoint_fingerprint(cfg)
                except Exception:  # a checkpoint not resolvable here (not mounted): compare the data only
                    checkpoint = None
                root = _data_root(cfg)
                match = {s.key: names_this(s.meta(), checkpoint, root) for s in found}
                best = max(match.values())
                view.shard = next((s for s in found if match[s.key] == best), None) if best else None
                view.superseded = [s for s in found if s is not view.shard]
                view.stand_in = root if best == ALIKE else None
            if view.shard is not None:
                view.state = view.shard.state(expected_of(arms, probes), cfg.retry_failed)
        except ShardCorruptError as err:
            view.error = str(err)
        views.append(view)
    return views


def estimate_hours(cfg: DictConfig) -> float | None:
    """Estimated H100-hours of one job (:func:`kamera.sweep.cost.h100_hours`: the model's published
    size on the experiment's stated tokens per item), when its experiment has a ``cost:`` block; None
    otherwise, NaN for a model without a readable published config (:func:`kamera.sweep.cost.not_estimated`)."""
    if cfg.get("cost") is None:
        return None
    return h100_hours(cfg)


def why_missing(model: str) -> str:
    """Why a sweep's model has no rows, from the model registry (no weights are loaded)."""
    from kamera.models import UnknownModelError, entry

    try:
        e = entry(model)
    except UnknownModelError:
        return f"{model} is not registered"
    if e.kind == "paper" and not e.has_adapter:
        return f"{model} has no adapter yet"
    return "no rows (its job has not run)"


def report(views: list[JobView]) -> list[str]:
    """The status lines of a sweep's jobs (and the reasons under each)."""
    lines = []
    hours, notes = [], []
    for v in views:  # a cost block that does not cover a job (an overridden benchmark) is a note on that job
        try:
            hours.append(estimate_hours(v.cfg))
            notes.append("")
        except ValueError as err:
            hours.append(None)
            notes.append(str(err))
    total = [h for h in hours if h is not None and h == h]
    for v, h, note in zip(views, hours, notes, strict=True):
        status = "corrupt" if v.error else v.state.summary()
        where = f"  {v.shard.meta_path.with_suffix('')}" if v.shard else ""
        cost = f"  (no cost estimate: {note})" if note else "" if h is None else f"  ~{h:.2f} H100-h" if h == h else \
            f"  (no cost estimate: {not_estimated(str(v.cfg.model.name))})"
        lines.append(f"  {status:<28} {' '.join(v.overrides) or v.name}{cost}{where}")
        if v.error:
            lines.append(f"      {v.error}")
        if v.stand_in:
            lines.append(f"      {v.stand_in} has no shard of its own (not run there): read the shard of the copy "
                         f"{(v.shard.meta().get('selection') or {}).get('root')}, whose annotation files are "
                         "byte-identical (its media may differ)")
        lines += [f"      {r}" for r in v.state.reasons()]
        if v.state.todo:
            lines.append(f"      {len(v.state.todo)} item(s) with arms or probes still to run")
        lines += [f"      superseded (same config, another checkpoint or data copy; not read): {s.meta_path}"
                  for s in v.superseded]
    if total:
        lines.append(f"  estimated total: {sum(total):.2f} H100-hours (jobs with a published config)")
    return lines


def main(argv: list[str] | None = None) -> int:
    overrides = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in overrides):
        print(__doc__)
        return 0
    named = any(o.split("=", 1)[0].lstrip("+~") == "experiment" for o in overrides)
    experiments = [None] if named else sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
    for experiment in experiments:
        args = overrides if experiment is None else [f"experiment={experiment}", *overrides]
        try:
            views = sweep_jobs(args)
        except (SweepError, ValueError) as err:
            print(f"cannot expand {' '.join(args)}: {err}", file=sys.stderr)
            return 1
        group = views[0].cfg.group if views else experiment
        root = results_root(views[0].cfg) / group if views else ""
        print(f"{group}: {sum(v.state.complete for v in views)}/{len(views)} job(s) done ({root})")
        for line in report(views):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
