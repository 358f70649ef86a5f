"""One job: a model × a benchmark selection × arms (and probes) → rows and probe records in a shard.

The job's item shape (:func:`kamera.job.shape_of`: arm items × arms, or window items × window probes)
selects and evaluates its items; the steps, the store and the semantics here are the same for both.

    preflight (no weights) → select the items (no model but the toy task's) → the job's identity and
    shard → skip the job if the shard already holds every (item, arm) and (item, probe) it asks for,
    at the code versions it asks for → load the model → per item with anything missing or stale:
    encode once, compute the shared quantities the missing arms and probes declare (``needs``), run
    each missing arm and probe, write the item's rows and records atomically (replacing its stale
    ones in the same write) → the job's state.

Every record is stamped with its plugin's ``version``, the row metrics' ``metrics_version`` and the run's
index (:mod:`kamera.job.store`); a record of another version is recomputed (logged once per plugin), and
``force=true`` recomputes every record of the job (its old rows are kept until each item's new ones
replace them, and a forced run killed midway is continued by the next run, forced or not).

A selection that met data defects (an annotation row that does not parse, a medium that does not decode,
beyond preflight's sample) stops the job there, before any weights load or anything is written: it could
never complete, and the repaired copy is a new job. Per item, an :class:`~kamera.errors.ItemError` (an input the
model cannot take, a medium that does not decode, non-finite logits) records the item as failed with its reason
and the job goes on; any other exception is a bug and stops the job. A job ends complete only when every selected
item has rows for every arm (or a recorded refusal) and its probe records, or a recorded failure, at least one
item is usable; otherwise it raises :class:`JobError`
naming what is missing (so ``python -m kamera.run`` exits non-zero), with every finished row kept.
"""

from __future__ import annotations

import inspect
import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from kamera.errors import ItemError
from kamera.job import (
    DTYPES,
    JobError,
    Selection,
    config_key,
    expected_of,
    identity,
    preflight,
    results_root,
    shape_of,
    threads_for,
)
from kamera.job.checks import defect_problems, unwritable
from kamera.job.rows import job_keys, lacking_columns
from kamera.job.samples import samples_path, write_samples
from kamera.job.shapes import JobShape
from kamera.job.spec import Spec
from kamera.job.store import RUN, SOURCE, STAMP, TABLES, JobState, Shard, current, provenance
from kamera.models import Adapter, load_model
from kamera.models.loading import peak_memory_bytes, resolve_device
from kamera.models.weights import CheckpointWeightsError
from kamera.progress import Progress
from kamera.provenance import digest, now
from kamera.run.track import Tracker

log = logging.getLogger("kamera.run")

__all__ = ["run"]


def _load(cfg: DictConfig, device: str) -> Adapter:
    """The job's model; a checkpoint whose weights do not load as its config describes (missing, unexpected or
    misshapen tensors that preflight's header check could not see) is a JobError naming them, not a run."""
    try:
        return load_model(
            cfg.model.name,
            dtype=DTYPES[cfg.model.dtype],
            device=device,
            path=cfg.model.path,
            models_root=cfg.paths.models,
            attn_implementation=cfg.model.attn_implementation,
            seed=cfg.seed,
            chat=cfg.model.get("chat", "template"),  # model=hf's option (conf/model/hf.yaml)
        )
    except CheckpointWeightsError as err:
        raise JobError(f"cannot load the model: {err}") from err


def run(cfg: DictConfig) -> Path:
    """The whole job; returns the rows' path. JobError when it cannot start or ends incomplete."""
    problems = preflight(cfg)
    if problems:
        raise JobError("cannot start this job:\n- " + "\n- ".join(problems))
    device = resolve_device(cfg.device)
    threads = threads_for(cfg.threads, device)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(cfg.seed)
    shape = shape_of(cfg)
    arms, probes = shape.specs(cfg)
    want = expected_of(arms, probes)
    adapter = _load(cfg, device) if shape.selects_from_model(cfg) else None
    selection = shape.select(cfg, cfg.n_items, adapter)
    defects = defect_problems(cfg, selection)  # beyond preflight's sample: known now, before any weights load
    if defects:
        raise JobError(
            "cannot start this job: the data has defects (repair them; the repaired copy is a new job):"
            "\n- " + "\n- ".join(defects)
        )
    ident = identity(cfg, selection)
    key = digest(ident)
    shard = Shard(results_root(cfg), cfg.group, key)
    log.info(
        "job %s (%s on %s, %d items): results → %s",
        key,
        cfg.model.name,
        cfg.bench.name,
        len(selection.items),
        shard.path,
    )
    shard.check()
    if not cfg.force and (why := lacking_columns(shard.path, shard.rows())):
        raise JobError(f"cannot continue job {key}: {why}")
    state = shard.state(want, cfg.retry_failed)
    _warn_source_drift(shard, [*arms, *probes])
    if cfg.force:
        log.info("job %s: force=true, every row and record of its arms and probes is recomputed", key)
    elif state.complete:
        try:  # best-effort: a complete job on read-only storage has nothing to write
            with shard.locked(required=False) as mine:
                if mine:
                    shard.update_meta(lambda m: m.update(last_run=now()))
                    if not samples_path(shard).exists():  # rows stored before per-sample logs were written
                        write_samples(shard)
        except OSError as err:
            log.warning(
                "job %s: could not record this run in %s (%s: %s); its rows are unchanged",
                key,
                shard.dir,
                type(err).__name__,
                err.strerror or err,
            )
        log.info("job %s is complete (%s): nothing to run", key, shard.path)
        return shard.path
    if why := unwritable(shard.dir):  # before any weights load (but the toy task's, which selects the items)
        raise JobError(f"cannot start this job: {why}")
    with shard.locked():
        _run_locked(cfg, shard, ident, selection, arms, probes, adapter, device, shape)
    state = shard.state(want, cfg.retry_failed)
    for line in state.reasons():
        log.warning("job %s: %s", key, line)
    if not state.complete:
        raise JobError(
            f"job {key} ({cfg.model.name} on {cfg.bench.name}) is incomplete: {state.summary()}\n- "
            + "\n- ".join(state.reasons() or ["see the log above"])
            + f"\nrows kept in {shard.path}; repair the data (a changed selection is a new job) or rerun to continue"
        )
    log.info("done: %s (%s)", shard.path, state.summary())
    return shard.path


def _begin(cfg: DictConfig, shard: Shard, ident: dict, selection: Selection, run: dict) -> int:
    """Record the run in the shard's json; its index in ``runs`` (what its records' ``run_index`` says). A forced
    run marks every older record stale (``force_from``) and retries the items recorded as failed."""
    index = len(shard.meta().get("runs", []))

    def change(meta: dict) -> None:
        meta.update(
            key=shard.key,
            config_key=config_key(cfg),
            group=cfg.group,
            identity=ident,
            selection=selection.record(),
            last_run=run["start"],
        )
        meta["config"] = OmegaConf.to_container(cfg, resolve=True)
        meta.setdefault("failed", {})
        meta.setdefault("refusals", [])
        meta.setdefault("empty_probes", [])
        meta.setdefault("runs", []).append(run)
        if cfg.force:
            meta.update(force_from=index, failed={})

    shard.update_meta(change)
    return index


def _log_stale(state: JobState, specs: dict[str, Spec]) -> None:
    """One line per plugin whose stored records are out of date: the versions stored and the current ones (records of
    a newer checkout's code are called so, not stale)."""
    for label, stamps in sorted(state.stale.items()):
        at = specs[label].stamp
        text = " ".join(f"{c} {v}" for c, v in zip(STAMP, at, strict=True))
        had = ", ".join(sorted(" ".join(f"{c} {v}" for c, v in zip(STAMP, st, strict=True)) for st in stamps))
        if label in state.newer:
            log.info(
                "%s: recomputing its records of newer code (stored at %s, this checkout is at %s)", label, had, text
            )
        else:
            why = "force=true" if at in stamps else f"stored at {had}, the code is at {text}"
            log.info("%s: recomputing its stale records (%s)", label, why)


def _warn_source_drift(shard: Shard, specs: list[Spec]) -> None:
    """One warning per plugin whose stored records at its current version were made by other source than this
    working tree's (their ``source_digest``): an edit without a version bump, whose rows would pass for new ones."""
    drift: dict[str, tuple[Spec, set[str]]] = {}
    for table, column in TABLES.items():
        frame = shard.table(table)
        if frame.empty or SOURCE not in frame:
            continue  # rows written before source digests existed say nothing
        stamps = frame.reindex(columns=list(STAMP)).fillna(1).astype(int).itertuples(index=False, name=None)
        for label, knobs, stamp, source in zip(frame[column], frame["knobs"], stamps, frame[SOURCE], strict=True):
            s = next((s for s in specs if (s.label, s.key) == (label, knobs)), None)
            if s is not None and stamp == s.stamp and isinstance(source, str) and source != s.source:
                drift.setdefault(label, (s, set()))[1].add(source)
    for label, (s, stored) in sorted(drift.items()):
        cls, root = type(s.plugin), Path(__file__).resolve().parents[2]
        where = Path(inspect.getfile(cls)).resolve()
        where = where.relative_to(root) if where.is_relative_to(root) else where
        log.warning(
            "warning: %s: its stored records at version %d were made by other source of %s (%s: "
            "source_digest %s, this working tree's %s); if the change alters its numbers, bump its version "
            "(version = %d on %s) and rerun; if it does not, rerun with force=true to restamp them",
            label,
            s.plugin.version,
            cls.__name__,
            where,
            "/".join(sorted(stored)),
            s.source,
            s.plugin.version + 1,
            cls.__name__,
        )


@dataclass
class _Run:
    """One run of a job under its shard lock: what its steps share."""

    cfg: DictConfig
    shard: Shard
    arms: list[Spec]
    probes: list[Spec]
    index: int  # its index in the json's ``runs`` (what its records' ``run_index`` says)
    info: dict  # its entry in ``runs``: provenance, then how it ended
    seconds: list[float] = field(default_factory=list)  # each item's wall time
    specs: dict[str, Spec] = field(init=False)

    def __post_init__(self) -> None:
        self.specs = {s.label: s for s in [*self.arms, *self.probes]}

    def stamped(self, record: dict, label: str) -> dict:
        """The record with what code made it and which run wrote it."""
        return {**record, **self.specs[label].stamp_columns, RUN: self.index}


def _run_locked(
    cfg: DictConfig,
    shard: Shard,
    ident: dict,
    selection: Selection,
    arms: list[Spec],
    probes: list[Spec],
    adapter: Adapter | None,
    device: str,
    shape: JobShape,
) -> None:
    """The job's work under its shard lock: the job shape's ``evaluate_item`` (an arm item × its arms, a window item ×
    its window probes, an engine item × its arms) runs on what the shape's ``serving`` yields for the run (the
    adapter, or a live engine session on its weights, closed when the run ends). It reads the job's state once, and
    the json once for what it needs of it: what the run writes after that is tracked, not read back."""
    info = provenance(device, DTYPES[cfg.model.dtype], cfg.model.attn_implementation)
    run = _Run(cfg, shard, arms, probes, _begin(cfg, shard, ident, selection, info), info)
    state = shard.state(expected_of(arms, probes), cfg.retry_failed)
    if not state.todo:
        info["end"] = now()
        shard.update_meta(lambda m: m["runs"][-1].update(end=info["end"]))
        return  # nothing left to compute (no usable item, or defects recorded by older code): no model needed
    _log_stale(state, run.specs)
    adapter = adapter or _load(cfg, device)
    info["attention"] = adapter.lm.config._attn_implementation
    unfit = [
        f"probe {s.label} cannot run on {cfg.model.name}: {why}" for s in probes if (why := s.plugin.refuses(adapter))
    ]
    if unfit:  # a probe is a measurement asked for by name: its refusal stops the job before any item runs
        raise JobError("cannot run this job (drop the probe or choose another model):\n- " + "\n- ".join(unfit))
    meta = shard.meta()
    refused = {label for label, _ in _refuse_arms(run, adapter, meta)}
    todo = {i: left for i, labels in state.todo.items() if (left := [x for x in labels if x not in refused])}
    keys = job_keys(cfg, shard.key, config_key(cfg))
    log.info("%d items selected, %d with arms or probes to run", len(selection.items), len(todo))
    tracker = Tracker.start(
        cfg.tracking.mode,
        cfg.tracking.project,
        cfg.group,
        shard.key,
        meta["config"],
        Path(cfg.paths.outputs) / "wandb",
        cfg.tracking.entity,
    )
    progress = Progress(len(todo), every_s=cfg.progress_every_s)
    serving = ExitStack()
    try:
        served = serving.enter_context(shape.serving(cfg, adapter))
        _item_loop(run, shape, served, selection.items, todo, set(meta["failed"]), keys, tracker, progress)
        tracker.log_table("rows", shard.rows())
    finally:
        serving.close()
        tracker.finish()
        _end(run)


def _refuse_arms(run: _Run, adapter: Adapter, meta: dict) -> set[tuple[str, str]]:
    """Record the arms that refuse the model and were not refused yet at their current versions (``meta``: the json
    as read once this run); their (label, knobs key) pairs. A refused arm's stale rows go with its refusal, so none of
    its rows is read any more and no item runs it (the caller drops it from the state's todo: the state it would read
    again is that one without the refused arms)."""
    shard, specs = run.shard, run.specs
    force_from = meta.get("force_from", 0)
    family = {
        (r["arm"], r["knobs"])
        for r in meta["refusals"]
        if r["item_id"] is None and r["arm"] in specs and current(r, specs[r["arm"]].stamp, force_from)
    }
    new = [
        run.stamped({"item_id": None, "arm": s.label, "knobs": s.key, "reason": why}, s.label)
        for s in run.arms
        if (s.label, s.key) not in family and (why := s.plugin.refuses(adapter))
    ]
    for r in new:
        log.warning("arm %s refuses %s: %s (no rows for it in this job)", r["arm"], run.cfg.model.name, r["reason"])
    refused = {(r["arm"], r["knobs"]) for r in new}
    if new:
        shard.append("rows", [], replace={key for key, _ in shard.stored("rows") if (key[1], key[2]) in refused})
        shard.update_meta(lambda m: m["refusals"].extend(new))
    return refused


def _item_loop(
    run: _Run,
    shape: JobShape,
    served: Any,
    items: list,
    todo: dict[str, list[str]],
    failed: set[str],
    keys: dict,
    tracker: Tracker,
    progress: Progress,
) -> None:
    """Per item with anything to run: evaluate its labels left, write its rows and probe records in place of its stale
    ones, record its refusals and empty probes and clear its old failure, or record its failure (an ItemError: its
    stale records dropped) and go on. ``failed``: the json's failed items, kept in step with it rather than re-read."""
    shard = run.shard
    for item in items:
        if item.item_id not in todo:
            continue
        left = set(todo[item.item_id])
        stale = {(item.item_id, s.label, s.key) for s in run.specs.values() if s.label in left}  # replaced now
        t_item = time.perf_counter()
        try:
            rows, records, refused = shape.evaluate_item(
                served,
                item,
                [s for s in run.arms if s.label in left],
                [s for s in run.probes if s.label in left],
                run.cfg,
                keys,
            )
        except ItemError as err:
            shard.append("probes", [], replace=stale)  # no stale record of a failed item stays readable
            shard.append("rows", [], replace=stale)
            shard.update_meta(lambda m, i=item.item_id, e=str(err): m["failed"].__setitem__(i, e))
            failed.add(item.item_id)
            log.warning("item %s failed: %s", item.item_id, err)
            progress.step(f"item {item.item_id} failed")
            continue
        shard.append("probes", [run.stamped(r, r["probe"]) for r in records], replace=stale)
        n = shard.append("rows", [run.stamped(r, r["arm"]) for r in rows], replace=stale)
        refused = [run.stamped(r, r["arm"]) for r in refused]
        empty = [
            run.stamped({"item_id": item.item_id, "probe": s.label, "knobs": s.key}, s.label)
            for s in run.probes
            if s.label in left and not any(r["probe"] == s.label for r in records)
        ]
        if refused or empty or item.item_id in failed:

            def change(m: dict, refused: list = refused, empty: list = empty, i: str = item.item_id) -> None:
                m["refusals"].extend(refused)
                m["empty_probes"].extend(empty)
                m["failed"].pop(i, None)

            shard.update_meta(change)
            failed.discard(item.item_id)
        tracker.log({f"{r['arm']}/{m}": r[m] for r in rows for m in ("kl", "correct")}, step=progress.done)
        run.seconds.append(time.perf_counter() - t_item)
        progress.step(f"{n} rows in {shard.path}")


def _end(run: _Run) -> None:
    """Record how the run ended (end time, attention, items run, peak memory, seconds per item) in its ``runs`` entry,
    log it, and write the job's per-sample log; also after a failed run, for what it did."""
    info, seconds, shard = run.info, run.seconds, run.shard
    info.update(
        end=now(),
        items_run=len(seconds),
        peak_memory_bytes=peak_memory_bytes(),
        seconds_per_item=sum(seconds) / len(seconds) if seconds else None,
    )
    log.info(
        "job %s: %d item(s) at %s s/item, peak memory %.2f GiB",
        shard.key,
        len(seconds),
        f"{info['seconds_per_item']:.2f}" if seconds else "–",
        info["peak_memory_bytes"] / 2**30,
    )
    fields = {k: info[k] for k in ("end", "attention", "items_run", "peak_memory_bytes", "seconds_per_item")}
    shard.update_meta(lambda m: m["runs"][-1].update(fields))
    log.info("job %s: per-sample log %s", shard.key, write_samples(shard))
