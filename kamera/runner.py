"""One job: a model × a benchmark selection × arms (and probes) → rows and probe records in a shard.

A window job (a window benchmark × window probes, :mod:`kamera.window.job`) runs the same steps with its
items built and evaluated there; its rows are keyed by the window probe as arm rows are by the arm.

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

import json
import logging
import math
import time
from collections.abc import Iterable
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from kamera.arms import ArmRefusal
from kamera.context import ReuseContext
from kamera.data import MediaError
from kamera.errors import ItemError
from kamera.items import EvalItem
from kamera.job import (
    DTYPES,
    MODEL_ITEM_SOURCES,
    JobError,
    Selection,
    Spec,
    config_key,
    expected_of,
    identity,
    job_specs,
    preflight,
    resolve_device,
    results_root,
    select,
    threads_for,
)
from kamera.metrics import E90_COLUMNS, choice_argmax, e90_columns, eta, flipped, kl, recovered
from kamera.models import Adapter, entry, load_model
from kamera.models.loading import peak_memory_bytes
from kamera.progress import Progress
from kamera.registry import SHARED
from kamera.store import Shard, digest, now, provenance
from kamera.track import Tracker
from kamera.window.job import evaluate_item as evaluate_window_item
from kamera.window.job import is_window

log = logging.getLogger("kamera.run")

__all__ = ["JobError", "evaluate_item", "preflight", "run"]


def _load(cfg: DictConfig, device: str) -> Adapter:
    return load_model(
        cfg.model.name, dtype=DTYPES[cfg.model.dtype], device=device, path=cfg.model.path,
        models_root=cfg.paths.models, attn_implementation=cfg.model.attn_implementation, seed=cfg.seed,
    )


def _prediction(adapter: Adapter, item: EvalItem, out, choice_ids, max_new_tokens: int) -> tuple[str, float]:
    if item.choices is not None:
        pred = item.choices[choice_ids.index(choice_argmax(out.logits, choice_ids))]
        return pred, float(pred == item.gold)
    text = adapter.decode(adapter.greedy(out, max_new_tokens, adapter.stop_ids())).strip()
    return text, float(item.score(text))


def encode(adapter: Adapter, item: EvalItem):
    """The item encoded once (vision tower included); its input problems become an ItemError."""
    try:
        return adapter.encode(item.spans())
    except (ValueError, MediaError) as err:  # too long for the model, media that does not decode, empty span
        raise ItemError(f"item {item.item_id} cannot be encoded by {adapter.name}: {err}") from err


def compute_shared(ctx: ReuseContext, needs: Iterable[str]) -> float:
    """Compute the shared quantities (in :data:`~kamera.registry.SHARED` order) before any arm runs; seconds."""
    t0 = time.perf_counter()
    for name in SHARED:
        if name in needs:
            getattr(ctx, name)
    return time.perf_counter() - t0


def item_measures(ctx: ReuseContext, needs: set[str]) -> dict:
    """Per-item measures that come with a shared quantity (the patch's e90/n_B when the patch is formed)."""
    if "patch" not in needs:
        return dict.fromkeys(E90_COLUMNS, math.nan)
    return dict(e90_columns(ctx.patch, ctx.conditioned))


def evaluate_item(
    adapter: Adapter, item: EvalItem, arms: list[Spec], probes: list[Spec], cfg: DictConfig, keys: dict
) -> tuple[list[dict], list[dict], list[dict]]:
    """Run ``arms`` and ``probes`` on one item: (rows, probe records, refusals), one row per arm served.

    The item is encoded once and the union of the arms' and probes' ``needs`` is computed before
    any of them runs, so ``forwards`` in a row counts the forwards that arm ran itself."""
    ctx = ReuseContext(adapter, encode(adapter, item), canonical_context=cfg.canonical_context)
    needs = set().union(*(s.plugin.needs for s in [*arms, *probes]))
    if arms:
        needs |= {"full", "blind"}  # every row's KL to re-prefill and the blind floor
    shared_seconds = compute_shared(ctx, needs)
    records = []
    for s in probes:
        for rec in s.plugin.run(ctx):
            records.append({**keys, "item_id": item.item_id, "subset": item.subset, "probe": s.label, "knobs": s.key,
                            **rec})
    if not arms:
        return [], records, []
    ref, blind = ctx.reprefill_logits, ctx.blind.logits
    choice_ids = adapter.letter_ids(item.choices) if item.choices is not None else None
    kl_blind = kl(ref, blind, what=f"re-prefill ‖ blind, item {item.item_id}")
    did_flip, page = flipped(blind, ref, choice_ids), ctx.page_bytes()
    per_item = item_measures(ctx, needs)
    rows, refusals = [], []
    for s in arms:
        t, before = time.perf_counter(), adapter.forwards.total()
        try:
            res = s.plugin.run(ctx)
        except ArmRefusal as why:
            refusals.append({"item_id": item.item_id, "arm": s.label, "knobs": s.key, "reason": str(why)})
            continue
        forwards = adapter.forwards.total() - before
        pred, correct = _prediction(adapter, item, res.out, choice_ids, cfg.max_new_tokens)
        pair = f"{s.label}, item {item.item_id}"
        k = kl(ref, res.out.logits, what=f"re-prefill ‖ {pair}")
        rank = res.params.get("rank")  # patch, orbit and shadowkv arms carry a rank knob
        rows.append({
            **keys,
            "item_id": item.item_id, "subset": item.subset, "split": item.split, "cluster_key": item.cluster_key,
            "arm": s.label, "arm_name": s.plugin.name, "knobs": s.key, "params": json.dumps(res.params, sort_keys=True, default=str),
            "rank": math.nan if rank is None else float(rank),
            "effective_rank": float(res.params.get("effective_rank", math.nan)),
            "effective_rotary_rank": float(res.params.get("effective_rotary_rank", math.nan)),
            "n_b": ctx.n_b, "delta": ctx.delta,
            "kl": k, "kl_blind": kl_blind, "eta": eta(k, kl_blind, cfg.eta_floor, what=f"η of {pair}"),
            "kl_oracle": kl(ctx.oracle.logits, res.out.logits, what=f"oracle ‖ {pair}") if "oracle" in needs else math.nan,
            "flip": did_flip, "recovered": recovered(res.out.logits, ref, choice_ids),
            "pred": pred, "gold": item.gold, "correct": correct, "n_choices": len(item.choices or []),
            "bytes": int(res.bytes), "bytes_frac": res.bytes / page, "patch_dtype": res.patch_dtype,
            "forwards": forwards, "recomputed_tokens": int(res.recomputed_tokens),
            **per_item, "seconds": time.perf_counter() - t, "shared_seconds": shared_seconds,
        })
    return rows, records, refusals


def _keys(cfg: DictConfig, key: str, ckey: str) -> dict:
    e = entry(cfg.model.name)
    return {
        "group": cfg.group, "job_key": key, "config_key": ckey, "model": cfg.model.name, "family": e.family,
        "attention": e.attention, "dtype": DTYPES[cfg.model.dtype], "bench": cfg.bench.name, "seed": cfg.seed,
    }


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
    arms, probes = job_specs(cfg)
    want = expected_of(arms, probes)
    adapter = _load(cfg, device) if cfg.bench.name in MODEL_ITEM_SOURCES else None
    selection = select(cfg, adapter)
    ident = identity(cfg, selection)
    key = digest(ident)
    shard = Shard(results_root(cfg), cfg.group, key)
    log.info("job %s (%s on %s, %d items): results → %s", key, cfg.model.name, cfg.bench.name, len(selection.items),
             shard.path)
    shard.check()
    state = shard.state(want, cfg.retry_failed)
    if state.complete:
        with shard.locked(required=False) as mine:
            if mine:
                shard.update_meta(lambda m: m.update(last_run=now()))
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
    keys = _keys(cfg, shard.key, config_key(cfg))
    log.info("%d items selected, %d with arms or probes to run", len(selection.items), len(todo))
    tracker = Tracker.start(cfg.tracking.mode, cfg.tracking.project, cfg.group, shard.key, meta["config"],
                            Path(cfg.paths.outputs) / "wandb", cfg.tracking.entity)
    progress = Progress(len(todo), every_s=cfg.progress_every_s)
    # the item shape decides who evaluates an item: a window job's window probes (kamera/window/job.py) or the arms
    evaluate = evaluate_window_item if is_window(cfg) else evaluate_item
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
