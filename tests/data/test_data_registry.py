"""Benchmarks are declared once: a module of a benchmark folder (kamera.data, kamera.window.benches) with a ``SPEC``,
and its conf/bench file(s)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
import yaml

from kamera.data import BENCHMARKS
from kamera.data.base import Benchmark
from kamera.job.arm_shape import MODEL_ITEM_SOURCES
from kamera.window.benches import WINDOW_BENCHES, WindowBench

CONF_BENCH = Path(__file__).resolve().parents[2] / "conf" / "bench"


def _conf_names() -> dict[str, str]:
    """conf/bench file stem → the benchmark it names."""
    return {p.stem: yaml.safe_load(p.read_text())["name"] for p in sorted(CONF_BENCH.glob("*.yaml"))}


@pytest.mark.parametrize("package, kind, registry", [("kamera.data", Benchmark, BENCHMARKS),
                                                     ("kamera.window.benches", WindowBench, WINDOW_BENCHES)])
def test_every_module_with_a_spec_is_registered(package, kind, registry):
    specs = {}
    for mod in pkgutil.iter_modules(importlib.import_module(package).__path__):
        spec = getattr(importlib.import_module(f"{package}.{mod.name}"), "SPEC", None)
        if isinstance(spec, kind):
            specs[spec.name] = spec
    assert specs and dict(registry) == specs


def test_every_benchmark_has_its_conf_file():
    named = set(_conf_names().values())
    missing = sorted((set(BENCHMARKS) | set(WINDOW_BENCHES)) - named)
    assert missing == [], "benchmarks without a conf/bench/<name>.yaml"


def test_every_conf_bench_file_names_a_registered_benchmark():
    known = set(BENCHMARKS) | set(WINDOW_BENCHES) | set(MODEL_ITEM_SOURCES)
    unknown = {stem: name for stem, name in _conf_names().items() if name not in known}
    assert unknown == {}, f"conf/bench files naming no data, window or model-item benchmark: {unknown}"
