"""The one discovery rule (kamera.discover): a plugin folder's modules, each declaring one plugin, found by a walk."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from kamera.discover import declared, import_all

_FOLDERS = itertools.count()
SPEC = "from types import SimpleNamespace\nSPEC = SimpleNamespace(name={!r})\n"


def folder(tmp_path, monkeypatch, **modules: str) -> str:
    """A fresh importable package in ``tmp_path`` holding ``modules`` (name → source); its name."""
    name = f"plugfolder_{next(_FOLDERS)}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    for mod, src in modules.items():
        (tmp_path / name / f"{mod}.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_every_module_but_base_is_imported_and_each_spec_found_by_name(tmp_path, monkeypatch):
    pkg = folder(tmp_path, monkeypatch, base="raise RuntimeError('base is not a plugin')", a=SPEC.format("alpha"),
                 b=SPEC.format("beta"), helpers="X = 1\n")
    assert [m.__name__.rsplit(".", 1)[1] for m in import_all(pkg)] == ["a", "b", "helpers"]
    assert declared(pkg, SimpleNamespace) == {
        "alpha": SimpleNamespace(name="alpha"),
        "beta": SimpleNamespace(name="beta"),
    }


def test_a_name_declared_twice_is_refused(tmp_path, monkeypatch):
    pkg = folder(tmp_path, monkeypatch, a=SPEC.format("same"), b=SPEC.format("same"))
    with pytest.raises(ValueError, match=rf"'same' is declared twice \({pkg}\.b and an earlier module\)"):
        declared(pkg, SimpleNamespace)


def test_a_spec_of_another_kind_is_refused(tmp_path, monkeypatch):
    pkg = folder(tmp_path, monkeypatch, a="SPEC = 3\n")
    with pytest.raises(TypeError, match=rf"{pkg}\.a\.SPEC is a int, not a SimpleNamespace"):
        declared(pkg, SimpleNamespace)
