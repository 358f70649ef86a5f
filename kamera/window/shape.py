"""A window job: one model × one window benchmark selection × a list of window probes → rows in a shard.

The second item shape (:mod:`kamera.job.shapes` picks it when the benchmark is a window benchmark), with the
arm jobs' identity, preflight, resume, completeness, failed-item and refusal semantics unchanged:

    config      ``window_probes`` (conf/window_probe labels, the same entry forms as ``arms``) instead of
                ``arms`` / ``probes`` (both must be empty); the window benchmark's options in
                ``bench.kwargs`` (:mod:`kamera.window.benches`)
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
from contextlib import AbstractContextManager, nullcontext
from typing import ClassVar, get_args

from omegaconf import DictConfig, OmegaConf

from kamera.errors import ItemError
from kamera.items.selection import Selection
from kamera.items.window import WindowEntry
from kamera.job.lists import unread_lists
from kamera.job.rows import GENERATION_COLUMNS, SAMPLE_LOG_COLUMNS, row
from kamera.job.selection import bench_root, read_benchmark
from kamera.job.spec import Spec, build_specs
from kamera.metrics import E90_COLUMNS
from kamera.models.base import Adapter
from kamera.models.flops import Forward, WindowShape
from kamera.reuse.context import CanonicalContext
from kamera.reuse.forwards import window_forwards
from kamera.window.benches import WindowBench
from kamera.window.context import WindowCanonical, WindowContext
from kamera.window.probes.base import ProbeRefusal

# where a window job's canonical KV(c|∅) may be prefilled: the values kamera.window.context reads, the arm jobs'
# (kamera.job.checks.CANONICAL_CONTEXTS) but "native" (a window's chunks have no native position behind the prefix)
WINDOW_CONTEXTS: tuple[str, ...] = get_args(WindowCanonical)
GIB = 1 << 30


class WindowItems:
    """Window items × window probes: every job whose benchmark is a window benchmark."""

    name = "window"
    order = 2
    claim_key, claim_bench = None, WindowBench
    places_items = False  # a window benchmark places its chunks itself
    kinds = ("window_probe",)  # the plugin list the job reads: cfg.window_probes
    identity_tag: ClassVar[dict] = {"shape": "window"}  # a window job's key never equals an arm job's
    cost_keys = ("chunk", "image_tokens")  # cost.tokens.<bench>: tokens per chunk, image tokens per chunk

    def __init__(self, bench: WindowBench) -> None:
        self.bench = bench

    @classmethod
    def of(cls, cfg: DictConfig, bench: object) -> WindowItems:
        return cls(bench)  # type: ignore[arg-type]

    def selects_from_model(self, cfg: DictConfig) -> bool:
        return False  # entries are built with the model later, one at a time

    def reads(self, cfg: DictConfig) -> str | None:
        """The data benchmark the window benchmark is cut from (None: streams made in memory)."""
        return self.bench.reads

    def options(self, cfg: DictConfig) -> dict:
        """The benchmark's options with their defaults filled in (ValueError naming unknown ones)."""
        return self.bench.kwargs(OmegaConf.to_container(cfg.bench.kwargs, resolve=True))

    def problems(self, cfg: DictConfig) -> list[str]:
        """Which plugin lists a job may use, the window keys, the benchmark's subset, split and options and the
        model it needs, one line each (no data, no weights)."""
        p = unread_lists(cfg, self.kinds, f"bench={self.bench.name} is a window benchmark, its job runs window_probes")
        if not cfg.get("window_probes"):
            p.append("window_probes=[]: a window job needs at least one window probe (conf/window_probe)")
        return p + self.window_problems(cfg)

    def window_problems(self, cfg: DictConfig) -> list[str]:
        """The window keys, the benchmark's subset, split and options and the model it needs, one line each (what
        every job over window items checks, whatever plugin list it runs)."""
        bench, p = self.bench, []
        if cfg.canonical_context in get_args(CanonicalContext) and cfg.canonical_context not in WINDOW_CONTEXTS:
            # an arm job's value a window job does not take (other bad values: kamera.job.checks.validate)
            p.append(f"canonical_context={cfg.canonical_context!r}: a window job prefills its canonicals behind the "
                     f"prefix or alone: one of {list(WINDOW_CONTEXTS)}")
        keep = cfg.get("window_keep_gb")
        if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 <= keep < math.inf:
            p.append(f"window_keep_gb={keep!r}: must be a number >= 0 (GiB a window item's context keeps between "
                     "probes)")
        if bench.frames and (why := _text_only(cfg)):
            p.append(why)
        if not isinstance(cfg.bench.kwargs, DictConfig):
            return p  # kamera.job.checks.validate reports it
        try:
            bench.resolve(cfg.bench.subset, cfg.bench.split)
            p += bench.problems(cfg.model.name, self.options(cfg))
        except ValueError as err:
            p.append(str(err))
        return p

    def plugin_problems(self, cfg: DictConfig, built: dict[str, list[Spec]]) -> list[str]:
        """Each window probe's own problems for this job before load (:meth:`kamera.window.probes.base.WindowProbe.
        problems`): the benchmark's window of k chunks, when its options are valid."""
        try:
            window = self.bench.window(self.options(cfg))
        except (ValueError, TypeError, KeyError):
            return []  # bad options: said by problems()
        return [f"window_probes: {s.label}: {line}" for specs in built.values() for s in specs
                for line in s.plugin.problems(window=window)]

    def specs(self, cfg: DictConfig) -> tuple[list[Spec], list[Spec]]:
        """(window probes, []): a window job's rows are keyed by the window probe as arm rows are by the arm."""
        return build_specs("window_probe", cfg.window_probes), []

    def select(self, cfg: DictConfig, n: int | None, adapter: Adapter | None = None) -> Selection:
        """The job's window entries, chosen deterministically without a model."""
        root = bench_root(cfg, self.bench.dir_name)
        subsets, split = self.bench.resolve(cfg.bench.subset, cfg.bench.split)
        return self.bench.select(subsets, split, cfg.seed, n, self.options(cfg),
                                 lambda name, kwargs: read_benchmark(name, root, cfg, n, kwargs))

    def bench_identity(self, cfg: DictConfig) -> dict:
        """Name, subsets and split spelled out, every option with its default."""
        subsets, split = self.bench.resolve(cfg.bench.subset, cfg.bench.split)
        return {"name": cfg.bench.name, "subset": ",".join(subsets), "split": split, "kwargs": self.options(cfg)}

    def cost_forwards(self, cfg: DictConfig, tokens: dict, specs: tuple[list[Spec], list[Spec]],
                      n_layers: int) -> tuple[list[Forward], float]:
        """(forwards per item, image tokens per item) from the experiment's stated ``cost.tokens.<bench>``."""
        o = self.options(cfg)
        shape = WindowShape(chunk=int(tokens["chunk"]), window=int(o["window"]), history=int(o["segments"]),
                            foreign=int(o.get("n_foreign", 0)), image_tokens=int(tokens.get("image_tokens", 0)))
        forwards = window_forwards(shape, [s.plugin for s in specs[0]], n_layers)
        return forwards, (shape.history + shape.foreign) * shape.image_tokens

    def runtime_identity(self, cfg: DictConfig) -> dict:
        return {}  # keyed by config, checkpoint and data alone, as an arm job

    def serving(self, cfg: DictConfig, adapter: Adapter) -> AbstractContextManager[Adapter]:
        return nullcontext(adapter)  # the entries are evaluated on the loaded adapter itself

    def evaluate_item(self, adapter: Adapter, entry: WindowEntry, arms: list[Spec], probes: list[Spec],
                      cfg: DictConfig, keys: dict) -> tuple[list[dict], list[dict], list[dict]]:
        return evaluate_item(self.bench, adapter, entry, arms, probes, cfg, keys)


def _text_only(cfg: DictConfig) -> str | None:
    """A text-only model on a window benchmark of video frames: one line naming both (None when the model reads
    images, or is not resolvable here: the model's own checks say so)."""
    from kamera.models import own_entry

    try:
        e = own_entry(cfg.model.name, cfg.model.path)
    except Exception:  # an unknown model or a missing checkpoint: said by kamera.job.checks
        return None
    if e.reads_images:
        return None
    return (f"bench={cfg.bench.name} has video frames in every chunk, but model {cfg.model.name} ({e.family}) is "
            "text-only: run it on a text benchmark, or pick a model that reads images")


# Arm-row columns a window row fills with its own neutral value (a window probe measures no oracle, no e90, writes
# no per-sample log and scores no generation).
ARM_COLUMNS = {"effective_rotary_rank": math.nan, "kl_oracle": math.nan, "recomputed_tokens": 0,
               **dict.fromkeys(E90_COLUMNS, math.nan), **dict.fromkeys(SAMPLE_LOG_COLUMNS),
               **dict.fromkeys(GENERATION_COLUMNS, math.nan)}


def evaluate_item(bench: WindowBench, adapter: Adapter, entry: WindowEntry, arms: list[Spec], probes: list[Spec],
                  cfg: DictConfig, keys: dict) -> tuple[list[dict], list[dict], list[dict]]:
    """Run the window probes ``arms`` on one entry: (rows, no probe records, refusals), the runner's contract.

    The item is built and encoded once; a probe it cannot serve is a refusal with its reason."""
    if probes:
        raise ValueError("a window job runs window probes only")
    t0 = time.perf_counter()
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
        rows += [row(keys, entry, s, {"n_choices": len(wctx.item.choices or ()), **ARM_COLUMNS, **r, "seconds": seconds,
                                      "shared_seconds": shared_seconds, "context_bytes": held}, {"shape": "window"})
                 for r in got]
        wctx.trim(keep)
    return rows, [], refusals


SHAPE = WindowItems  # this room's job shape (kamera.discover.job_shapes)
