"""The one discovery rule: a plugin folder is a package whose modules each declare one plugin, found by walking
the folder, so adding an arm, a probe or a benchmark is adding its file (and its ``conf/`` file), never an edit to
a list. Arms and probes register themselves when imported (:func:`import_all`); a benchmark is its module's
``SPEC`` (:func:`declared`): data benchmarks in :mod:`kamera.data`, window benchmarks in
:mod:`kamera.window.benches`. A job's item shape is the ``SHAPE`` of a room's ``shape.py`` (:func:`job_shapes`),
beside what it drives (``kamera/arms/shape.py``, ``kamera/window/shape.py``, ...): never one of that room's plugins.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import yaml

T = TypeVar("T")
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"  # every plugin's, model's and experiment's config file
ROOMS = Path(__file__).resolve().parent  # the kamera package: its folders are the rooms
SHAPE = "shape"  # the module of a room that declares the job shape driving that room (SHAPE), not a plugin


def paper_block(experiment: str) -> dict:
    """The ``paper:`` block of conf/experiment/<experiment>.yaml as written (the paper's values, in one place):
    what a diagnostic CLI prints beside its own figures; renderers read it through ``experiments.common``."""
    return yaml.safe_load((CONF_DIR / "experiment" / f"{experiment}.yaml").read_text()).get("paper") or {}


def import_all(package: str, skip: Iterable[str] = ("base", SHAPE)) -> list[ModuleType]:
    """Every module of ``package`` but those named in ``skip`` (and its job shape's), imported, in name order."""
    path = importlib.import_module(package).__path__
    return [importlib.import_module(f"{package}.{m.name}") for m in pkgutil.iter_modules(path) if m.name not in skip]


def declared(package: str, kind: type[T], attr: str = "SPEC", skip: Iterable[str] = ("base", SHAPE)) -> dict[str, T]:
    """The module-level ``attr`` of each module of ``package`` that has one, by its ``name``, in module order;
    TypeError when one is not a ``kind``, ValueError when two modules declare one name."""
    found: dict[str, T] = {}
    for module in import_all(package, skip):
        spec = getattr(module, attr, None)
        if spec is None:
            continue
        if not isinstance(spec, kind):
            raise TypeError(f"{module.__name__}.{attr} is a {type(spec).__name__}, not a {kind.__name__}")
        name = spec.name  # type: ignore[attr-defined]
        if name in found:
            raise ValueError(f"{kind.__name__} {name!r} is declared twice ({module.__name__} and an earlier module)")
        found[name] = spec
    return found


def job_shapes(root: Path = ROOMS, package: str = "kamera") -> dict[str, type]:
    """Every room's job shape: the ``SHAPE`` class of each ``<root>/<room>/shape.py`` (``kamera/<room>/shape.py``), by
    its ``name``, in room order.

    Read lazily by the job layer (:func:`kamera.job.shapes.shape_of`): a shape imports the job layer it plugs into,
    so the job layer finds it by this rule and never names it. TypeError for a shape module without a ``SHAPE``
    class, ValueError when two rooms declare one name."""
    found: dict[str, type] = {}
    for path in sorted(root.glob(f"*/{SHAPE}.py")):
        module = importlib.import_module(f"{package}.{path.parent.name}.{SHAPE}")
        shape = getattr(module, "SHAPE", None)
        if not isinstance(shape, type):
            raise TypeError(f"{module.__name__} declares no SHAPE class (the job shape of its room)")
        if shape.name in found:
            raise ValueError(f"job shape {shape.name!r} is declared twice ({module.__name__} and an earlier room)")
        found[shape.name] = shape
    return found
