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
