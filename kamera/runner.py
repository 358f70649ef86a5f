"""One job: a model × a benchmark selection × a list of arms → one row per (item, arm) in a shard.

For each item the shared forwards (re-prefill, canonical, blind; the oracle if asked) run once and
every arm reads them; then KL, η, flip / recover, accuracy, bytes and seconds go into the rows. The
job validates every name and path before any forward runs, skips items already in its shard, and
writes the shard atomically after each item (see ``kamera.store``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from kamera.arms import Arm, ArmRefusal, UnknownArmError, make_arm
from kamera.context import ReuseContext
from kamera.items import EvalItem, from_chunked
from kamera.metrics import E90_COLUMNS, choice_argmax, e90_columns, eta, flipped, kl, recovered
from kamera.models import (
    Adapter,
    CheckpointNotFoundError,
    UnknownModelError,
    checkpoint_path,
    entry,
    load_model,
)
from kamera.models.registry import weights_fingerprint
from kamera.progress import Progress
from kamera.store import Shard, config_hash
from kamera.sweep import CONF_DIR, to_dict
from kamera.track import Tracker

log = logging.getLogger("kamera.run")

ITEM_SOURCES = {"binding": "kamera.items:toy_items"}  # benchmarks served outside kamera.data


@dataclass
class ArmSpec:
    """One entry of ``arms``: its label (the conf/arm file name) and the arm built from the file's knobs."""

    label: str
    knobs: dict
    arm: Arm


def arm_names() -> list[str]:
    """Arm variants available as conf/arm/<label>.yaml."""
    return sorted(p.stem for p in (CONF_DIR / "arm").glob("*.yaml"))


def arm_specs(labels: list[str]) -> list[ArmSpec]:
    """Build each listed arm from its conf/arm file; unknown labels list the available ones."""
    if not labels:
        raise ValueError("arms is empty: list at least one arm, e.g. arms=[reprefill,blind,patch_r16]")
    if len(set(labels)) != len(labels):
        raise ValueError(f"arms lists a label twice: {labels}")
    known = arm_names()
    bad = [a for a in labels if a not in known]
    if bad:
        raise UnknownArmError(f"unknown arm(s) {bad}; conf/arm has: {', '.join(known)}")
    out = []
    for label in labels:
        knobs = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "arm" / f"{label}.yaml"), resolve=True)
        name = knobs.pop("name")
        out.append(ArmSpec(label, {"name": name, **knobs}, make_arm(name, **knobs)))
    return out


def result_config(cfg: DictConfig) -> dict:
    """The keys that define a job's numbers (and so its hash); operational keys are left out."""
    return {
        "model": {"name": cfg.model.name, "dtype": cfg.model.dtype, "weights": weights_fingerprint(cfg.model.name)},
        "bench": {
            "name": cfg.bench.name,
            "subset": cfg.bench.subset,
            "split": cfg.bench.split,
            "kwargs": OmegaConf.to_container(cfg.bench.kwargs, resolve=True),
        },
        "arms": [{"label": s.label, **s.knobs} for s in arm_specs(list(cfg.arms))],
        "n_items": cfg.n_items,
        "seed": cfg.seed,
        "canonical_context": cfg.canonical_context,
        "eta_floor": cfg.eta_floor,
        "max_new_tokens": cfg.max_new_tokens,
    }


def bench_root(cfg: DictConfig) -> Path | None:
    """The benchmark directory: bench.root, else <paths.data>/<the benchmark's directory name>."""
    from kamera.data import get_benchmark

    if cfg.bench.root:
        return Path(cfg.bench.root)
    spec = get_benchmark(cfg.bench.name)
    return Path(cfg.paths.data) / spec.dir_name if cfg.paths.data and spec.dir_name else None


def preflight(cfg: DictConfig) -> list[str]:
    """Every problem that would stop this job, found without loading weights or running a forward."""
    problems = []
    try:
        e = entry(cfg.model.name)
        if e.kind == "paper":
            checkpoint_path(e.name, cfg.model.path, cfg.paths.models)
            if e.adapter is None:
                problems.append(f"model {e.name} ({e.family}) has no adapter yet: {e.notes or 'unverified family'}")
    except (UnknownModelError, CheckpointNotFoundError) as err:
        problems.append(str(err))
    if cfg.bench.name == "binding" and not cfg.model.name.startswith("toy_"):
        problems.append(f"bench=binding needs a toy model (toy_binding, toy_binding_text), not {cfg.model.name}")
    if cfg.bench.name not in ITEM_SOURCES:
        from kamera.data import BenchmarkDataMissing, get_benchmark
        from kamera.data.registry import resolve_root

        try:
            spec = get_benchmark(cfg.bench.name)
            spec.resolve_subsets(cfg.bench.subset)
            spec.resolve_split(cfg.bench.split)
            if spec.dir_name:
                resolve_root(spec, bench_root(cfg))
        except (ValueError, BenchmarkDataMissing) as err:
            problems.append(str(err))
    try:
        arm_specs(list(cfg.arms))
    except (ValueError, TypeError) as err:
        problems.append(str(err))
    return problems


def load_eval_items(cfg: DictConfig, adapter: Adapter) -> list[EvalItem]:
    """The job's items, selected deterministically by the benchmark loader (or the toy task)."""
    if cfg.bench.name in ITEM_SOURCES:
        import importlib

        module, func = ITEM_SOURCES[cfg.bench.name].split(":")
        source = getattr(importlib.import_module(module), func)
        return source(adapter, n_items=cfg.n_items, seed=cfg.seed, subset=cfg.bench.subset, **cfg.bench.kwargs)
    from kamera.data import load_items

    def length(item) -> int:
        return adapter.encode(item.spans()).n_tokens

    loaded = load_items(
        cfg.bench.name, root=bench_root(cfg), subset=cfg.bench.subset, split=cfg.bench.split,
        n_items=cfg.n_items, seed=cfg.seed, max_tokens=adapter.max_positions, length_fn=length,
        **OmegaConf.to_container(cfg.bench.kwargs, resolve=True),
    )
    r = loaded.report
    log.info("%s: %d items selected of %d eligible rows; %d skipped", cfg.bench.name, len(loaded), r.n_rows, len(r.skipped))
    return [from_chunked(it) for it in loaded]


def _prediction(adapter: Adapter, item: EvalItem, out, choice_ids, max_new_tokens: int) -> tuple[str, float]:
    if item.choices is not None:
        pred = item.choices[choice_ids.index(choice_argmax(out.logits, choice_ids))]
        return pred, float(pred == item.gold)
    text = adapter.decode(adapter.greedy(out, max_new_tokens, adapter.stop_ids())).strip()
    return text, float(item.score(text))


def evaluate_item(
    adapter: Adapter, item: EvalItem, specs: list[ArmSpec], cfg: DictConfig, keys: dict, refusals: Counter
) -> list[dict]:
    """Run every arm on one item; one row per arm (an arm refusing this item is counted, not rowed)."""
    t0 = time.perf_counter()
    ctx = ReuseContext(adapter, item.spans(), canonical_context=cfg.canonical_context)
    ref, blind = ctx.reprefill_logits, ctx.blind.logits
    choice_ids = adapter.letter_ids(item.choices) if item.choices is not None else None
    kl_blind = kl(ref, blind, what=f"re-prefill ‖ blind, item {item.item_id}")
    oracle = ctx.oracle.logits if any(s.arm.name == "oracle4d" for s in specs) else None
    has_patch = any(s.arm.name == "patch" for s in specs)
    e90 = e90_columns(ctx.patch, ctx.conditioned) if has_patch else dict.fromkeys(E90_COLUMNS, math.nan)
    shared = time.perf_counter() - t0
    page = ctx.page_bytes()
    did_flip = flipped(blind, ref, choice_ids)
    rows = []
    for s in specs:
        t = time.perf_counter()
        try:
            res = s.arm.run(ctx)
        except ArmRefusal as why:
            if not refusals[(s.label, str(why))]:
                log.warning("arm %s skips item %s: %s", s.label, item.item_id, why)
            refusals[(s.label, str(why))] += 1
            continue
        pred, correct = _prediction(adapter, item, res.out, choice_ids, cfg.max_new_tokens)
        pair = f"{s.label}, item {item.item_id}"
        k = kl(ref, res.out.logits, what=f"re-prefill ‖ {pair}")
        rank = res.params.get("rank", math.nan)  # patch, orbit and shadowkv arms carry a rank knob
        rows.append({
            **keys,
            "item_id": item.item_id, "subset": item.subset, "split": item.split, "cluster_key": item.cluster_key,
            "arm": s.label, "arm_name": s.arm.name, "params": json.dumps(res.params, sort_keys=True, default=str),
            "rank": float("nan" if rank is None else rank),
            "effective_rank": float(res.params.get("effective_rank", math.nan)),
            "n_b": ctx.n_b, "delta": ctx.delta,
            "kl": k, "kl_blind": kl_blind, "eta": eta(k, kl_blind, cfg.eta_floor, what=f"η of {pair}"),
            "kl_oracle": kl(oracle, res.out.logits, what=f"oracle ‖ {pair}") if oracle is not None else math.nan,
            "flip": did_flip, "recovered": recovered(res.out.logits, ref, choice_ids),
            "pred": pred, "gold": item.gold, "correct": correct, "n_choices": len(item.choices or []),
            "bytes": int(res.bytes), "bytes_frac": res.bytes / page,
            **e90, "seconds": time.perf_counter() - t, "shared_seconds": shared,
        })
    return rows


def run(cfg: DictConfig) -> Path:
    """The whole job: preflight, resume, evaluate, write rows, track. Returns the shard path."""
    problems = preflight(cfg)
    if problems:
        raise SystemExit("cannot start this job:\n- " + "\n- ".join(problems))
    torch.manual_seed(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    resolved = to_dict(cfg)
    rcfg = result_config(cfg)
    digest = config_hash(rcfg)
    shard = Shard(cfg.paths.results, cfg.group, digest)
    log.info("job %s (%s on %s): rows → %s", digest, cfg.model.name, cfg.bench.name, shard.path)
    if shard.is_complete():
        log.info("job %s is complete (%s): nothing to run", digest, shard.path)
        return shard.path
    with shard.locked():
        shard.write_config({"result_config": rcfg, "resolved": resolved})
        adapter = load_model(
            cfg.model.name, dtype=cfg.model.dtype, device=cfg.device, path=cfg.model.path,
            models_root=cfg.paths.models, attn_implementation=cfg.model.attn_implementation, seed=cfg.seed,
        )
        specs, refusals = [], Counter()
        for spec in arm_specs(list(cfg.arms)):
            why = spec.arm.refuses(adapter)
            if why:
                log.warning("arm %s refuses %s: %s (no rows for it in this job)", spec.label, cfg.model.name, why)
                refusals[(spec.label, why)] += 1
            else:
                specs.append(spec)
        items = load_eval_items(cfg, adapter)
        done = shard.done_items()
        todo = [it for it in items if it.item_id not in done]
        log.info("%d items, %d already in the shard, %d to run", len(items), len(items) - len(todo), len(todo))
        e = entry(cfg.model.name)
        keys = {
            "group": cfg.group, "config_hash": digest, "model": cfg.model.name, "family": e.family,
            "attention": e.attention, "dtype": cfg.model.dtype, "bench": cfg.bench.name, "seed": cfg.seed,
        }
        tracker = Tracker.start(
            cfg.tracking.mode, cfg.tracking.project, cfg.group, digest, resolved,
            Path(cfg.paths.outputs) / "wandb", cfg.tracking.entity,
        )
        progress = Progress(len(items), len(items) - len(todo), every_s=cfg.progress_every_s)
        try:
            for it in todo:
                rows = evaluate_item(adapter, it, specs, cfg, keys, refusals)
                if not rows:
                    progress.step(f"no arm served item {it.item_id}")
                    continue
                n = shard.append(rows)
                tracker.log({f"{r['arm']}/{m}": r[m] for r in rows for m in ("kl", "correct")}, step=progress.done)
                progress.step(f"{n} rows in {shard.path}")
            tracker.log_table("rows", shard.read())
            shard.mark_complete(len(items), [{"arm": a, "reason": r, "count": n} for (a, r), n in refusals.items()])
        finally:
            tracker.finish()
    log.info("done: %s", shard.path)
    return shard.path
