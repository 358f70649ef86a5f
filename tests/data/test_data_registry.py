"""Benchmarks are declared once: a module of a benchmark folder (kamera.data, kamera.toy.benches,
kamera.window.benches, kamera.engine.benches) with a ``SPEC``, and its conf/bench file(s); one map holds them all by
name."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
import yaml

from kamera.data import BENCHMARKS
from kamera.data.base import Benchmark
from kamera.engine.benches import ENGINE_BENCHES, EngineBench
from kamera.job.shapes import BENCHES, one_map
from kamera.toy.benches import MODEL_BENCHES, ModelBench
from kamera.window.benches import WINDOW_BENCHES, WindowBench

CONF_BENCH = Path(__file__).resolve().parents[2] / "conf" / "bench"


def _conf_names() -> dict[str, str]:
    """conf/bench file stem → the benchmark it names."""
    return {p.stem: yaml.safe_load(p.read_text())["name"] for p in sorted(CONF_BENCH.glob("*.yaml"))}


@pytest.mark.parametrize(
    "package, kind, registry",
    [
        ("kamera.data", Benchmark, BENCHMARKS),
        ("kamera.toy.benches", ModelBench, MODEL_BENCHES),
        ("kamera.engine.benches", EngineBench, ENGINE_BENCHES),
        ("kamera.window.benches", WindowBench, WINDOW_BENCHES),
    ],
)
def test_every_module_with_a_spec_is_registered(package, kind, registry):
    specs = {}
    for mod in pkgutil.iter_modules(importlib.import_module(package).__path__):
        spec = getattr(importlib.import_module(f"{package}.{mod.name}"), "SPEC", None)
        if isinstance(spec, kind):
            specs[spec.name] = spec
    assert specs and dict(registry) == specs


def test_every_benchmark_has_its_conf_file():
    named = set(_conf_names().values())
    missing = sorted(set(BENCHES) - named)
    assert missing == [], "benchmarks without a conf/bench/<name>.yaml"


def test_every_conf_bench_file_names_a_registered_benchmark():
    unknown = {stem: name for stem, name in _conf_names().items() if name not in BENCHES}
    assert unknown == {}, f"conf/bench files naming no data, window or model-item benchmark: {unknown}"


def test_one_map_holds_every_folder_and_refuses_a_name_declared_twice():
    assert set(BENCHES) == set(BENCHMARKS) | set(MODEL_BENCHES) | set(WINDOW_BENCHES) | set(ENGINE_BENCHES)
    assert len(BENCHES) == len(BENCHMARKS) + len(MODEL_BENCHES) + len(WINDOW_BENCHES) + len(ENGINE_BENCHES)
    with pytest.raises(ValueError, match=r"benchmark\(s\) \['binding'\] declared in two benchmark folders"):
        one_map(BENCHMARKS, MODEL_BENCHES, {"binding": WINDOW_BENCHES["window_toy"]})
