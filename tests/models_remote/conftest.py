"""Fixtures: shaped checkpoints of the remote-code models (from the session cache of ``tests/shaped_fixtures.py``,
:func:`kamera.models.shaped.ensure`) and their adapters, one adapter in memory at a time.

A shaped checkpoint has the real model's names, dimensions and files with random weights, so the fp32
Kimi-VL adapter alone holds 5.6 GB: at most one adapter is kept loaded at a time.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from shaped_fixtures import shaped_cache, shaped_root  # noqa: F401  (fixtures)

from kamera.models import entry, load_model


@pytest.fixture(scope="session")
def shaped(shaped_root):  # noqa: F811  (the fixture imported above)
    """shaped(name) → the shaped checkpoint directory of ``name`` (2 layers, 2 vision layers), written once."""
    return lambda name: Path(shaped_root(name)) / entry(name).repo_dir


class Loaded:
    """One adapter in memory at a time, with what tests build on it (an item's shared forwards): loading
    another model or dtype drops both, so a held context never keeps a 5.6 GB model alive."""

    def __init__(self, shaped) -> None:
        self.shaped = shaped
        self.key: tuple[str, str] | None = None
        self.adapter = None
        self.built: dict[str, object] = {}

    def __call__(self, name: str, dtype: str = "float32"):
        if self.key != (name, dtype):
            self.key, self.adapter, self.built = None, None, {}
            gc.collect()
            self.adapter = load_model(name, path=self.shaped(name), dtype=dtype)
            self.key = (name, dtype)
        return self.adapter

    def build(self, name: str, dtype: str, what: str, make):
        """``make(adapter)``, built once per loaded adapter under ``what``."""
        adapter = self(name, dtype)
        if what not in self.built:
            self.built[what] = make(adapter)
        return self.built[what]


@pytest.fixture(scope="session")
def remote(shaped):
    """remote(name, dtype) → the adapter on the shaped checkpoint; remote.build(...) caches objects built on it."""
    loaded = Loaded(shaped)
    yield loaded
    loaded.adapter, loaded.built = None, {}
