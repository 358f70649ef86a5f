"""make real's order (gate; every step faked, nothing installed or loaded): a broken identity on the real weights
stops the run before any job runs on them, and the engine check runs in the venv the Makefile names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kamera.real import __main__ as real


@pytest.fixture
def faked(tmp_path, monkeypatch):
    """install / assemble / convert faked to succeed at once; the calls each later step gets, recorded."""
    calls: dict[str, list] = {"jobs": [], "engine": []}
    hub = tmp_path / "hub"
    monkeypatch.setattr(real.package, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(real.package, "install", lambda root: None)
    monkeypatch.setattr(real.package, "assemble", lambda root: (tmp_path / "m.gguf", "0" * 64))
    monkeypatch.setitem(sys.modules, "kamera.real.convert", type(sys)("kamera.real.convert"))
    sys.modules["kamera.real.convert"].convert = lambda gguf, sha, out: hub
    monkeypatch.setattr(real, "musique_root", lambda root, n: tmp_path / "data")
    monkeypatch.setattr(real, "run_job", lambda overrides: calls["jobs"].append(overrides) or tmp_path / "g" / "s")
    monkeypatch.setattr(real, "engine_check", lambda hub, venv: calls["engine"].append(venv) or {"rc": 0, "output": ""})
    return calls


def test_a_broken_identity_stops_before_any_job(faked, monkeypatch, capsys):
    from kamera.real import identities

    monkeypatch.setattr(identities, "run", lambda *a: False)
    assert real.main(["--items", "2"]) == 1
    assert faked["jobs"] == [] and faked["engine"] == []
    assert "an identity is broken on the real weights (above); no job runs on them" in capsys.readouterr().err


def test_the_engine_check_runs_in_the_named_venv(faked, monkeypatch, tmp_path):
    from kamera.real import identities, report

    monkeypatch.setattr(identities, "run", lambda *a: True)
    monkeypatch.setattr(report, "write", lambda *a: [])
    (tmp_path / "g").mkdir()
    assert real.main(["--items", "2", "--engine-venv", str(tmp_path / "venv")]) == 0
    assert faked["jobs"] and faked["engine"] == [Path(tmp_path / "venv")]
    assert (tmp_path / "g" / "real_run.json").is_file()


def test_a_missing_engine_venv_is_named(tmp_path):
    out = real.engine_check(tmp_path / "hub", tmp_path / "nowhere")
    assert out == {"rc": None, "output": f"no engine venv at {tmp_path / 'nowhere'} "
                                         f"(make engine-venv ENGINE_VENV={tmp_path / 'nowhere'})"}
