"""The item shape of a job: the plug point of the job layer. A shape is what a job plans, runs per item, writes
and identifies; each lives beside what it drives, as its room's ``shape.py`` declaring ``SHAPE``
(:func:`kamera.discover.job_shapes`): arm items × arms and probes (:mod:`kamera.arms.shape`), window items × window
probes (:mod:`kamera.window.shape`), window items as pools × the policies that replay an agent's trace
(:mod:`kamera.agent.shape`), the engine's items × arms served through a live engine (:mod:`kamera.engine.shape`).
:func:`shape_of` asks them in their ``order`` and takes the first that claims the job (by its benchmark's kind, its
``policies``, its ``engine``); the job layer names none of them. A new shape is one module and its config
(docs/architecture.md, "A new job shape").

Preflight, selection, identity, evaluation and the cost estimate all ask :func:`shape_of` and call the shape's
methods (:class:`JobShape`); no other module asks which shape a job is.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cache
from typing import Any, ClassVar, Protocol, runtime_checkable

from omegaconf import DictConfig

from kamera.data import BENCHMARKS
from kamera.discover import job_shapes
from kamera.engine.benches import ENGINE_BENCHES
from kamera.items.selection import Selection
from kamera.job.spec import Spec
from kamera.models.base import Adapter
from kamera.models.flops import Forward
from kamera.toy.benches import MODEL_BENCHES
from kamera.window.benches import WINDOW_BENCHES


@runtime_checkable
class JobShape(Protocol):
    """What the job layer asks of an item shape (each room's ``SHAPE``; :mod:`kamera.arms.shape` is the first)."""

    name: ClassVar[str]  # the shape's name (unique across rooms)
    order: ClassVar[int]  # when :func:`shape_of` asks it: lower first; the arm shape, which claims every job, last
    claim_key: ClassVar[str | None]  # the job key that, set, makes a job this shape's (``policies``, ``engine``)
    claim_bench: ClassVar[type | None]  # the benchmark kind (its SPEC's class) whose jobs are this shape's
    places_items: ClassVar[bool]  # whether ``item_offset`` moves its items
    kinds: tuple[str, ...]  # the plugin lists the job reads (``arm``/``probe``, ``window_probe``, ``policy``)
    identity_tag: dict  # what the shape adds to the config identity
    cost_keys: tuple[str, ...]  # the ``cost.tokens.<bench>`` keys it reads, the tokens per item (or chunk) first

    @classmethod
    def of(cls, cfg: DictConfig, bench: object) -> JobShape:
        """The shape for this job."""

    def problems(self, cfg: DictConfig) -> list[str]:
        """Its checks, one line each, without data or weights."""

    def plugin_problems(self, cfg: DictConfig, built: dict[str, list[Spec]]) -> list[str]:
        """Its plugins' own checks for the job (device, model depth, window k)."""

    def specs(self, cfg: DictConfig) -> tuple[list[Spec], list[Spec]]:
        """Its plugins: (arms, probes), or (window probes / policies, [])."""

    def selects_from_model(self, cfg: DictConfig) -> bool:
        """Whether selecting needs the loaded model (the toy task)."""

    def reads(self, cfg: DictConfig) -> str | None:
        """The data benchmark (kamera.data) whose files the job reads, or None."""

    def select(self, cfg: DictConfig, n: int | None, adapter: Adapter | None = None) -> Selection:
        """The items, deterministically."""

    def bench_identity(self, cfg: DictConfig) -> dict:
        """The benchmark part of the identity, defaults spelled out."""

    def cost_forwards(self, cfg: DictConfig, tokens: dict, specs: tuple[list[Spec], list[Spec]],
                      n_layers: int) -> tuple[list[Forward], int]:
        """Forwards and image tokens per item."""

    def runtime_identity(self, cfg: DictConfig) -> dict:
        """What the job's runtime adds to its identity ({}: the harness; an engine's libraries and kernels)."""

    def serving(self, cfg: DictConfig, adapter: Adapter) -> AbstractContextManager[Any]:
        """A context around the job's items, yielding what evaluate_item is handed (the adapter, an engine session)."""

    def evaluate_item(self, served_by: Any, item: Any, arms: list[Spec], probes: list[Spec], cfg: DictConfig,
                      keys: Any) -> tuple:
        """One item: (rows, probe records, refusals)."""


@cache
def shapes() -> tuple[type[JobShape], ...]:
    """Every room's job shape in the order :func:`shape_of` asks them."""
    return tuple(sorted(job_shapes().values(), key=lambda s: s.order))


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


def shape_of(cfg: DictConfig) -> JobShape:
    """The job's item shape: the first of :func:`shapes` that claims it. In their order: an agent job when it lists
    ``policies``, engine items when ``engine`` is set (conf/engine/<name>.yaml) or the benchmark is an engine
    benchmark (which then asks for an engine), window items when its benchmark is a window benchmark, else arm items."""
    bench = BENCHES.get(cfg.bench.name)
    return next(s for s in shapes() if claims(s, cfg, bench)).of(cfg, bench)


def claims(shape: type[JobShape], cfg: DictConfig, bench: object) -> bool:
    """Whether ``shape`` runs the job: its key is set, or the job's benchmark (its SPEC; None for an unknown name) is
    of its kind; a shape that names neither claims every job."""
    if shape.claim_key is None and shape.claim_bench is None:
        return True
    return bool(shape.claim_key and cfg.get(shape.claim_key)) or (
        shape.claim_bench is not None and isinstance(bench, shape.claim_bench))


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
