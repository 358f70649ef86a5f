"""Shared fixtures: tiny adapters, built once per session (item helpers live in ``tinyfamilies.py``)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from kamera.models import load_model

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny():
    """tiny(name, dtype="float32") → a cached adapter of a tiny random model."""
    cache: dict = {}

    def get(name: str, dtype: str = "float32"):
        if (name, dtype) not in cache:
            cache[(name, dtype)] = load_model(name, dtype=dtype)
        return cache[(name, dtype)]

    return get


SHAPED_FIXTURES = {"shaped_cache", "shaped_root", "shaped", "remote"}  # tests/shaped_fixtures.py, models_remote
CANARY = "smolvlm2"  # the one shaped checkpoint `make test` writes (tests/models/test_shaped.py)


def pytest_collection_modifyitems(config, items):
    """Keep the tiers honest: a test on shaped checkpoints (GBs each; up to ~32 GB in pytest's basetemp
    without ``$KAMERA_SHAPED``) carries the ``shaped`` mark, unless it runs the SmolVLM2 canary."""
    stray = [item.nodeid for item in items
             if SHAPED_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("shaped") is None
             and CANARY not in getattr(getattr(item, "callspec", None), "params", {}).values()]
    if stray:
        raise pytest.UsageError("tests on shaped checkpoints must be marked @pytest.mark.shaped (only the "
                                f"{CANARY} canary stays in make test): " + ", ".join(stray))
