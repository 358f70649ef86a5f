"""One job: a model × a benchmark selection × arms (and probes) → rows and probe records in a shard.

The job's item shape (:func:`kamera.job.shape_of`: arm items × arms, or window items × window probes)
selects and evaluates its items; the steps, the store and the semantics here are the same for both.

    preflight (no weights) → select the items (no model but the toy task's) → the job's identity and
    shard → skip the job if the shard already holds every (item, arm) and (item, probe) it asks for
    → load the model → per item with anything missing: encode once, compute the shared quantities
    the missing arms and probes declare (``needs``), run each missing arm and probe, write the item's
    rows and records atomically → the job's state.

Per item, an :class:`~kamera.errors.ItemError` (an input the model cannot take, a medium that does
not decode, non-finite logits) records the item as failed with its reason and the job goes on;
any other exception is a bug and stops the job. A job ends complete only when every selected item
has rows for every arm (or a recorded refusal) and its probe records, or a recorded failure, at
least one item is usable and the data read had no defects; otherwise it raises :class:`JobError`
naming what is missing (so ``python -m kamera.run`` exits non-zero), with every finished row kept.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

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
    resolve_device,
    results_root,
    shape_of,
    threads_for,
)
from kamera.job.rows import job_keys
from kamera.job.store import Shard, digest, now, provenance
from kamera.models import Adapter, load_model
from kamera.models.loading import peak_memory_bytes
from kamera.progress import Progress
from kamera.run.track import Tracker

log = logging.getLogger("kamera.run")

__all__ = ["run"]


def _load(cfg: DictConfig, device: str) -> Adapter:
    return load_model(
        cfg.model.name, dtype=DTYPES[cfg.model.dtype], device=device, path=cfg.model.path,
        models_root=cfg.paths.models, attn_implementation=cfg.model.attn_implementation, seed=cfg.seed,
    )


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
    ident = identity(cfg, selection)
    key = digest(ident)
    shard = Shard(results_root(cfg), cfg.group, key)
    log.info("job %s (%s on %s, %d items): results → %s", key, cfg.model.name, cfg.bench.name, len(selection.items),
             shard.path)
    shard.check()
    state = shard.state(want, cfg.retry_failed)
    if state.complete:
        try:  # best-effort: a complete job on read-only storage has nothing to write
            with shard.locked(required=False) as mine:
                if mine:
                    shard.update_meta(lambda m: m.update(last_run=now()))
        except OSError as err:
            log.warning("job %s: could not record this run in %s (%s: %s); its rows are unchanged", key, shard.dir,
                        type(err).__name__, err.strerror or err)
        log.info("job %s is complete (%s): nothing to run", key, shard.path)
        return shard.path
    with shard.locked():
        _run_locked(cfg, shard, ident, selection, arms, probes, adapter, device)
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


def _begin(cfg: DictConfig, shard: Shard, ident: dict, selection: Selection, run: dict) -> None:
    def change(meta: dict) -> None:
        meta.update(key=shard.key, config_key=config_key(cfg), group=cfg.group, identity=ident,
                    selection=selection.record(), last_run=run["start"])
        meta["config"] = OmegaConf.to_container(cfg, resolve=True)
        meta.setdefault("failed", {})
        meta.setdefault("refusals", [])
        meta.setdefault("empty_probes", [])
        meta.setdefault("runs", []).append(run)

    shard.update_meta(change)


def _run_locked(cfg, shard: Shard, ident, selection: Selection, arms, probes, adapter, device: str) -> None:
    run_info = provenance(device, DTYPES[cfg.model.dtype], cfg.model.attn_implementation)
    _begin(cfg, shard, ident, selection, run_info)
    if selection.defects:
        log.warning("%d data defect(s) in the selection walk; the job cannot complete until the data is repaired",
                    len(selection.defects))
    if not shard.state(expected_of(arms, probes), cfg.retry_failed).todo:
        run_info["end"] = now()
        shard.update_meta(lambda m: m["runs"][-1].update(end=run_info["end"]))
        return  # nothing left to compute (data defects or no usable item): no model needed
    adapter = adapter or _load(cfg, device)
    run_info["attention"] = adapter.lm.config._attn_implementation
    meta = shard.meta()
    family = {(r["arm"], r["knobs"]) for r in meta["refusals"] if r["item_id"] is None}
    new = [{"item_id": None, "arm": s.label, "knobs": s.key, "reason": why}
           for s in arms if (s.label, s.key) not in family and (why := s.plugin.refuses(adapter))]
    for r in new:
        log.warning("arm %s refuses %s: %s (no rows for it in this job)", r["arm"], cfg.model.name, r["reason"])
    if new:
        shard.update_meta(lambda m: m["refusals"].extend(new))
    todo = shard.state(expected_of(arms, probes), cfg.retry_failed).todo
    keys = job_keys(cfg, shard.key, config_key(cfg))
    log.info("%d items selected, %d with arms or probes to run", len(selection.items), len(todo))
    tracker = Tracker.start(cfg.tracking.mode, cfg.tracking.project, cfg.group, shard.key, meta["config"],
                            Path(cfg.paths.outputs) / "wandb", cfg.tracking.entity)
    progress = Progress(len(todo), every_s=cfg.progress_every_s)
    evaluate = shape_of(cfg).evaluate_item  # arm items × arms, or window items × window probes
    item_seconds: list[float] = []
    try:
        for item in selection.items:
            if item.item_id not in todo:
                continue
            left = set(todo[item.item_id])
            t_item = time.perf_counter()
            try:
                rows, records, refused = evaluate(adapter, item, [s for s in arms if s.label in left],
                                                  [s for s in probes if s.label in left], cfg, keys)
            except ItemError as err:
                shard.update_meta(lambda m, i=item.item_id, e=str(err): m["failed"].__setitem__(i, e))
                log.warning("item %s failed: %s", item.item_id, err)
                progress.step(f"item {item.item_id} failed")
                continue
            shard.append("probes", records)
            n = shard.append("rows", rows)
            empty = [[item.item_id, s.label, s.key] for s in probes if s.label in left
                     and not any(r["probe"] == s.label for r in records)]
            if refused or empty or item.item_id in shard.meta()["failed"]:
                def change(m, refused=refused, empty=empty, i=item.item_id):
                    m["refusals"].extend(refused)
                    m["empty_probes"].extend(empty)
                    m["failed"].pop(i, None)
                shard.update_meta(change)
            tracker.log({f"{r['arm']}/{m}": r[m] for r in rows for m in ("kl", "correct")}, step=progress.done)
            item_seconds.append(time.perf_counter() - t_item)
            progress.step(f"{n} rows in {shard.path}")
        tracker.log_table("rows", shard.rows())
    finally:
        tracker.finish()
        run_info.update(end=now(), items_run=len(item_seconds), peak_memory_bytes=peak_memory_bytes(),
                        seconds_per_item=sum(item_seconds) / len(item_seconds) if item_seconds else None)
        log.info("job %s: %d item(s) at %s s/item, peak memory %.2f GiB", shard.key, len(item_seconds),
                 f"{run_info['seconds_per_item']:.2f}" if item_seconds else "–", run_info["peak_memory_bytes"] / 2**30)
        fields = {k: run_info[k] for k in ("end", "attention", "items_run", "peak_memory_bytes", "seconds_per_item")}
        shard.update_meta(lambda m: m["runs"][-1].update(fields))
