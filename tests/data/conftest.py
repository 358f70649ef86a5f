"""Fixtures for the loader tests: one tiny copy of every file-based benchmark per session, and fresh
per-test copies for tests that corrupt or edit files."""

from __future__ import annotations

from pathlib import Path

import pytest

from kamera.data import BENCHMARKS, make_fixture

FILE_BENCHES = [b for b, spec in BENCHMARKS.items() if spec.dir_name is not None]


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A KAMERA_DATA-style folder holding every benchmark's fixture (written once per session)."""
    root = tmp_path_factory.mktemp("kamera_data")
    for bench in FILE_BENCHES:
        make_fixture(bench, root, n=3, seed=0)
    return root


@pytest.fixture(scope="session")
def bench_root(data_root: Path):
    """bench_root(bench) → that benchmark's fixture directory (shared; do not modify)."""
    return lambda bench: data_root / str(BENCHMARKS[bench].dir_name)


@pytest.fixture
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """fresh(bench, **kw) → a private fixture copy to break; its cache stays inside tmp_path."""
    monkeypatch.setenv("KAMERA_CACHE", str(tmp_path / "cache"))
    return lambda bench, **kw: make_fixture(bench, tmp_path / "data", **kw)
