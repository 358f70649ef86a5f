"""Fixtures: shaped checkpoints of the remote-code models and their adapters, one adapter in memory at a time."""

from __future__ import annotations

import gc

import pytest
import torch
from remote_models import LOADERS, shaped_dir


@pytest.fixture(scope="session")
def shaped():
    return shaped_dir


class Loaded:
    """One adapter in memory at a time, with what tests build on it (an item's shared forwards): loading
    another model or dtype drops both, so a held context never keeps a 5.6 GB model alive."""

    def __init__(self) -> None:
        self.key: tuple[str, str] | None = None
        self.adapter = None
        self.built: dict[str, object] = {}

    def __call__(self, name: str, dtype: str = "float32"):
        if self.key != (name, dtype):
            self.key, self.adapter, self.built = None, None, {}
            gc.collect()
            self.adapter = LOADERS[name](shaped_dir(name), dtype=getattr(torch, dtype), device="cpu",
                                         attn_implementation="sdpa")
            self.key = (name, dtype)
        return self.adapter

    def build(self, name: str, dtype: str, what: str, make):
        """``make(adapter)``, built once per loaded adapter under ``what``."""
        adapter = self(name, dtype)
        if what not in self.built:
            self.built[what] = make(adapter)
        return self.built[what]


@pytest.fixture(scope="session")
def remote():
    """remote(name, dtype) → the adapter on the shaped checkpoint; remote.build(...) caches objects built on it."""
    loaded = Loaded()
    yield loaded
    loaded.adapter, loaded.built = None, {}
