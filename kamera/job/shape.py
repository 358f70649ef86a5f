"""The item shape of a job, chosen in this one place: arm items × arms (and probes), or window items × window
probes (:mod:`kamera.job.window_shape`), by the job's benchmark; or window items as pools × the policies that
replay an agent's trace over them (:mod:`kamera.job.agent_shape`), when the job lists ``policies``; or, when
``engine`` is set (or the benchmark is an engine benchmark), the engine's items × arms served through a live engine
(:mod:`kamera.job.engine_shape`).

Preflight, selection, identity, evaluation and the cost estimate all ask :func:`shape_of` and call the shape's
methods; no other module asks which shape a job is. Both shapes offer:

    kinds                 the plugin lists the job reads (``arms``/``probes``, or ``window_probes``)
    identity_tag          what the shape adds to the config identity
    cost_keys             the ``cost.tokens.<bench>`` keys it reads, the tokens per item (or chunk) first
    problems(cfg)         its checks, one line each, without data or weights
    plugin_problems(cfg, built)  its plugins' own checks for the job (device, model depth, window k)
    specs(cfg)            its plugins: (arms, probes) or (window probes, [])
    selects_from_model    whether selecting needs the loaded model (the toy task)
    reads(cfg)            the data benchmark (kamera.data) whose files the job reads, or None
    select(cfg, n, adapter)      the items, deterministically
    bench_identity(cfg)          the benchmark part of the identity, defaults spelled out
    cost_forwards(cfg, tokens, specs, n_layers)   forwards and image tokens per item
    runtime_identity(cfg)        what the job's runtime adds to its identity ({}: the harness; an engine's libraries
                                 and attention backend)
    serving(cfg, adapter)        a context manager around the job's items, yielding what evaluate_item is handed
                                 (the adapter; an engine job's live engine session)
    evaluate_item(adapter, item, arms, probes, cfg, keys)   (rows, probe records, refusals)
"""

from __future__ import annotations

from omegaconf import DictConfig

from kamera.data import BENCHMARKS
from kamera.engine.benches import ENGINE_BENCHES, EngineBench
from kamera.items.selection import Selection
from kamera.job.agent_shape import AgentItems
from kamera.job.arm_shape import ArmItems
from kamera.job.engine_shape import EngineItems
from kamera.job.spec import Spec
from kamera.job.window_shape import WindowItems
from kamera.toy.benches import MODEL_BENCHES
from kamera.window.benches import WINDOW_BENCHES, WindowBench

ARM_ITEMS = ArmItems()


def one_map(*registries: dict) -> dict:
    """The registries merged; ValueError naming a benchmark two of them declare."""
    found: dict = {}
    for registry in registries:
        if twice := sorted(set(found) & set(registry)):
            raise ValueError(f"benchmark(s) {twice} declared in two benchmark folders")
        found.update(registry)
    return found


# Every benchmark by name, each its module's SPEC (kamera.discover) in the folder of its kind: data benchmarks
# (kamera.data), the model's own task (kamera.toy.benches), window benchmarks (kamera.window.benches), the engine's
# token-id items (kamera.engine.benches).
BENCHES = one_map(BENCHMARKS, MODEL_BENCHES, WINDOW_BENCHES, ENGINE_BENCHES)


def shape_of(cfg: DictConfig) -> ArmItems | WindowItems | AgentItems | EngineItems:
    """The job's item shape: an agent job's when it lists ``policies`` (:mod:`kamera.job.agent_shape`), engine items
    when ``engine`` is set (conf/engine/<name>.yaml) or the benchmark is an engine benchmark (which then asks for an
    engine), window items when its benchmark is a window benchmark, else arm items."""
    bench = BENCHES.get(cfg.bench.name)
    if cfg.get("policies"):
        return AgentItems(bench if isinstance(bench, WindowBench) else None, cfg)
    if cfg.get("engine") or isinstance(bench, EngineBench):
        return EngineItems(cfg.engine.name if cfg.get("engine") else None)
    return WindowItems(bench) if isinstance(bench, WindowBench) else ARM_ITEMS


def job_specs(cfg: DictConfig) -> tuple[list[Spec], list[Spec]]:
    """The plugins a job runs per item: (arms, probes), or (window probes, []) for a window job."""
    return shape_of(cfg).specs(cfg)


def select(cfg: DictConfig, adapter=None, n_items: int | None = -1) -> Selection:
    """The job's items, chosen deterministically by the benchmark loader (or the toy model's task).

    Files are read and the selected items' images decoded (rows that fail are skipped with their
    reason: :attr:`~kamera.items.selection.Selection.defects`); no model is needed except for the toy
    task. There is no length filter here: an item too long for the model fails when it is encoded, with
    that reason, so the selection does not depend on the model and each item is encoded once."""
    return shape_of(cfg).select(cfg, cfg.n_items if n_items == -1 else n_items, adapter)
