"""The item shape as a plugin layer (docs/architecture.md, "A new job shape"): each room's ``shape.py`` declares
its ``SHAPE``, the job layer finds it by the one discovery rule and picks it by what the job asks for, and no
module outside the shapes names one."""

from __future__ import annotations

import ast
import importlib
import shutil
import sys
from pathlib import Path

import pytest
from pipeline_support import ROOT, job_config

from kamera.discover import job_shapes
from kamera.job.shapes import JobShape, shape_of, shapes

SHAPE_MODULES = {"kamera.arms.shape", "kamera.window.shape", "kamera.agent.shape", "kamera.engine.shape"}


def test_every_rooms_shape_module_is_discovered_and_on_the_shapes_floors():
    sys.path.insert(0, str(ROOT / "tests"))
    from test_layers import FLOORS, room_of

    found = {f"{s.__module__}": name for name, s in job_shapes().items()}
    assert set(found) == {f"kamera.{p.parent.name}.shape" for p in (ROOT / "kamera").glob("*/shape.py")}
    assert set(found) == SHAPE_MODULES and sorted(found.values()) == ["agent", "arm", "engine", "window"]
    job_floor = next(i for i, f in enumerate(FLOORS) if "kamera.job" in f)
    assert all(next(i for i, f in enumerate(FLOORS) if room_of(m) in f) > job_floor for m in found)


@pytest.mark.parametrize("shape", shapes(), ids=lambda s: s.name)
def test_each_shape_answers_the_whole_contract(shape):
    members = sorted(m for m in {*JobShape.__annotations__, *vars(JobShape)} if not m.startswith("_"))
    assert members == sorted(["name", "order", "places_items", "kinds", "identity_tag", "cost_keys", "claim_key",
                              "claim_bench", "of",
                              "problems", "plugin_problems", "specs", "selects_from_model", "reads", "select",
                              "bench_identity", "cost_forwards", "runtime_identity", "serving", "evaluate_item"])
    assert [m for m in members if not hasattr(shape, m)] == []


def test_the_arm_shape_is_asked_last_and_claims_every_job():
    assert [s.name for s in shapes() if s.claim_key is None and s.claim_bench is None] == ["arm"]
    assert shapes()[-1].name == "arm" and len({s.order for s in shapes()}) == len(shapes())


@pytest.mark.parametrize(("overrides", "name"), [
    (("bench=synthetic", "arms=[blind]"), "arm"),
    (("bench=binding", "model=toy_binding", "arms=[blind]"), "arm"),
    (("model=tiny_kimi", "bench=window_synthetic", "arms=[]", "window_probes=[recall]"), "window"),
    (("bench=engine_mc", "engine=own", "model=tiny_qwen2", "probes=[]"), "engine"),
    (("bench=synthetic", "engine=own", "arms=[blind]", "probes=[]"), "engine"),
    (("model=tiny_kimi", "bench=window_synthetic", "arms=[]", "policies=[prefix]", "trace=web"), "agent"),
])
def test_shape_of_picks_the_first_shape_that_claims_the_job(overrides, name, tmp_path):
    shape = shape_of(job_config(tmp_path, *overrides))
    assert isinstance(shape, JobShape) and shape.name == name


def test_no_module_outside_the_shapes_names_one():
    """The job layer (and run, sweep, experiments) reach a shape only through shape_of; only the agent shape,
    which extends the window shape, imports another."""
    bad = []
    for base in ("kamera", "experiments"):
        for path in (ROOT / base).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                         if isinstance(node, ast.ImportFrom) else [])
                hits = set(names) & SHAPE_MODULES
                if hits and (module, *hits) != ("kamera.agent.shape", "kamera.window.shape"):
                    bad.append(f"{module} imports {sorted(hits)}")
    assert not bad, "\n".join(bad)


def _room(root: Path, room: str, body: str) -> None:
    (root / "pkg" / room).mkdir(parents=True, exist_ok=True)
    (root / "pkg" / room / "shape.py").write_text(body)


def test_a_shape_module_without_its_shape_or_a_name_twice_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    _room(tmp_path, "a", "class A:\n    name = 'x'\n\n\nSHAPE = A\n")
    assert list(job_shapes(tmp_path / "pkg", "pkg")) == ["x"]
    _room(tmp_path, "b", "class B:\n    name = 'x'\n\n\nSHAPE = B\n")
    with pytest.raises(ValueError, match="job shape 'x' is declared twice"):
        job_shapes(tmp_path / "pkg", "pkg")
    shutil.rmtree(tmp_path / "pkg" / "b")
    _room(tmp_path, "c", "class C:\n    name = 'y'\n")
    importlib.invalidate_caches()
    with pytest.raises(TypeError, match=r"pkg\.c\.shape declares no SHAPE class"):
        job_shapes(tmp_path / "pkg", "pkg")
