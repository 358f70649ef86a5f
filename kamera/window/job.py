"""A window job: one model × one window benchmark selection × a list of window probes → rows in a shard.

The second item shape of :mod:`kamera.job`; the job's shape is its benchmark's (:func:`is_window`), and
:mod:`kamera.job` and :mod:`kamera.runner` call in here where it matters, so a window job has the arm
jobs' identity, preflight, resume, completeness, failed-item and refusal semantics unchanged:

    config      ``window_probes`` (conf/window_probe labels, the same entry forms as ``arms``) instead of
                ``arms`` / ``probes`` (both must be empty); the window benchmark's options in
                ``bench.kwargs`` (:mod:`kamera.window.bench`)
    identity    as an arm job's, plus ``shape: window``, the benchmark's options spelled out with their
                defaults, so a window job's key never equals an arm job's
    rows        one per (item, probe, setting, variant) in the job's rows table, with the arm rows'
                columns (kl, kl_blind, eta, flip, recovered, pred, gold, correct, bytes, bytes_frac, rank,
                forwards, seconds …) plus ``shape = "window"``, ``probe``, ``setting``, ``variant``,
                ``stored_forwards``, ``window`` and the probe's own measures (docs/window.md). The store's
                plugin column ``arm`` holds the window probe's label and ``knobs`` its knobs, so the store
                keys, resumes and counts (item, window probe) pairs exactly as it does (item, arm) pairs
    refusals    a probe that cannot run on an item (:class:`~kamera.window.probes.base.ProbeRefusal`, or a
                toy stream built for another probe) is recorded as an arm refusal with its reason

Per item the probes share one :class:`~kamera.window.context.WindowContext` (each forward once); after
each probe the context is trimmed to ``window_keep_gb`` (least recently used views released, recomputed
if a later probe asks again). ``seconds`` is the probe's wall time on the item (on each of its rows),
``shared_seconds`` the item's encoding, ``context_bytes`` the bytes the context held when the probe
returned (before the trim): the item's working set for that probe.
"""

from __future__ import annotations

import math
import time

from omegaconf import DictConfig, OmegaConf

from kamera.errors import ItemError
from kamera.job import Selection, Spec, bench_root
from kamera.metrics import E90_COLUMNS
from kamera.models.base import Adapter
from kamera.window.bench import WINDOW_BENCHES, WindowBench, WindowEntry
from kamera.window.context import WindowContext
from kamera.window.probes.base import ProbeRefusal

CANONICAL_CONTEXTS = ("prefix", "none")  # where a window job's canonical KV(c|∅) is prefilled
GIB = 1 << 30


def window_bench(cfg: DictConfig) -> WindowBench | None:
    """The job's window benchmark, or None for an arm job."""
    return WINDOW_BENCHES.get(cfg.bench.name)


def is_window(cfg: DictConfig) -> bool:
    """Whether the job's items are window items (its benchmark is a window benchmark)."""
    return window_bench(cfg) is not None


def options(cfg: DictConfig) -> dict:
    """The benchmark's options with their defaults filled in (ValueError naming unknown ones)."""
    return window_bench(cfg).kwargs(OmegaConf.to_container(cfg.bench.kwargs, resolve=True))


def _plain(value: object) -> object:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def problems(cfg: DictConfig) -> list[str]:
    """The shape's checks, one line each: which plugin lists a job may use, the window keys, the benchmark's
    subset, split and options and the model it needs (no data, no weights)."""
    bench, listed = window_bench(cfg), cfg.get("window_probes")
    if bench is None:
        return [f"window_probes={_plain(listed)!r}: only a window benchmark's job runs window probes "
                f"(bench={', '.join(WINDOW_BENCHES)})"] if listed else []
    p = [f"{key}={_plain(cfg[key])!r}: bench={bench.name} is a window benchmark, its job runs window_probes; "
         f"set {key}=[]" for key in ("arms", "probes") if cfg[key]]
    if not listed:
        p.append("window_probes=[]: a window job needs at least one window probe (conf/window_probe)")
    if cfg.canonical_context == "native":  # other bad values: kamera.job.validate
        p.append(f"canonical_context={cfg.canonical_context!r}: a window job prefills its canonicals behind the "
                 f"prefix or alone: one of {list(CANONICAL_CONTEXTS)}")
    keep = cfg.get("window_keep_gb")
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 <= keep < math.inf:
        p.append(f"window_keep_gb={keep!r}: must be a number >= 0 (GiB a window item's context keeps between probes)")
    if not isinstance(cfg.bench.kwargs, DictConfig):
        return p  # kamera.job.validate reports it
    try:
        bench.resolve(cfg.bench.subset, cfg.bench.split)
        p += bench.problems(cfg.model.name, options(cfg))
    except ValueError as err:
        p.append(str(err))
    return p


def select(cfg: DictConfig, n: int | None) -> Selection:
    """The job's window entries, chosen deterministically without a model."""
    bench = window_bench(cfg)
    return bench.select(cfg, n, options(cfg), bench_root(cfg))


def bench_identity(cfg: DictConfig) -> dict:
    """The ``bench`` part of the job's identity: name, subsets and split spelled out, every option."""
    subsets, split = window_bench(cfg).resolve(cfg.bench.subset, cfg.bench.split)
    return {"name": cfg.bench.name, "subset": ",".join(subsets), "split": split, "kwargs": options(cfg)}


# Arm-row columns a window row fills with its own neutral value (a window probe measures no oracle, no e90).
ARM_COLUMNS = {"effective_rotary_rank": math.nan, "kl_oracle": math.nan, "recomputed_tokens": 0,
               **dict.fromkeys(E90_COLUMNS, math.nan)}


def evaluate_item(adapter: Adapter, entry: WindowEntry, arms: list[Spec], probes: list[Spec], cfg: DictConfig,
                  keys: dict) -> tuple[list[dict], list[dict], list[dict]]:
    """Run the window probes ``arms`` on one entry: (rows, no probe records, refusals), the runner's contract.

    The item is built and encoded once; a probe it cannot serve is a refusal with its reason."""
    if probes:
        raise ValueError("a window job runs window probes only")
    bench, t0 = window_bench(cfg), time.perf_counter()
    try:
        wctx = WindowContext(adapter, entry.build(adapter), cfg.canonical_context, cfg.eta_floor)
    except ValueError as err:  # a medium that does not decode, an empty chunk, choices sharing a first token
        raise ItemError(f"window item {entry.item_id} cannot be encoded by {adapter.name}: {err}") from err
    shared_seconds, keep = time.perf_counter() - t0, int(cfg.window_keep_gb * GIB)
    rows, refusals = [], []
    for s in arms:
        t, why = time.perf_counter(), bench.refuses(s.plugin, entry)
        if why is None:
            try:
                got = s.plugin.run(wctx)
                why = None if got else f"{s.label} returned no rows"
            except ProbeRefusal as err:
                why = str(err)
        if why is not None:
            refusals.append({"item_id": entry.item_id, "arm": s.label, "knobs": s.key, "reason": why})
            continue
        seconds, held = time.perf_counter() - t, wctx.held_bytes()
        rows += [{**keys, "item_id": entry.item_id, "subset": entry.subset, "split": entry.split,
                  "cluster_key": entry.cluster_key, "shape": "window", "arm": s.label, "arm_name": s.plugin.name,
                  "knobs": s.key, "n_choices": len(wctx.item.choices or ()), **ARM_COLUMNS, **r,
                  "seconds": seconds, "shared_seconds": shared_seconds, "context_bytes": held} for r in got]
        wctx.trim(keep)
    return rows, [], refusals


__all__ = ["bench_identity", "evaluate_item", "is_window", "problems", "select", "window_bench"]

