"""Helpers shared by the arm tests.

The root ``tests/conftest.py`` holds the standard item; it is loaded here by path under its own
name, because ``from conftest import …`` resolves to whichever ``conftest`` pytest imported last
(``tests/data/conftest.py`` shadows it once that folder is collected).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from kamera.context import ReuseContext
from kamera.core import ChunkKV

_NAME = "kamera_tests_root_conftest"


def root_conftest():
    if _NAME not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "conftest.py"
        spec = importlib.util.spec_from_file_location(_NAME, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[_NAME]


TINY: list[str] = root_conftest().TINY
standard_spans = root_conftest().standard_spans

_CONTEXTS: dict[str, ReuseContext] = {}


def shared_ctx(tiny, name: str) -> ReuseContext:
    """One standard-item context per family for the whole session (its shared forwards run once)."""
    if name not in _CONTEXTS:
        adapter = tiny(name)
        _CONTEXTS[name] = ReuseContext(adapter, standard_spans(adapter))
    return _CONTEXTS[name]


def rel_err(a: ChunkKV, b: ChunkKV) -> float:
    """Worst layer-channel of max|a − b| / max|b|."""
    return max(
        float((x.double() - y.double()).abs().max() / y.double().abs().max().clamp_min(1e-30))
        for la, lb in zip(a.layers, b.layers, strict=True)
        for x, y in zip(la, lb, strict=True)
    )


def b_kv(ctx: ReuseContext, out) -> ChunkKV:
    """B's KV as the arm's query forward saw it (read from that forward's cache)."""
    a, z = ctx.ranges[ctx.b]
    return ctx.adapter.read(out.cache, a, z, ctx.native_positions(ctx.b))


def changed_rows(ctx: ReuseContext, kv: ChunkKV) -> list[int]:
    """B rows whose KV differs from blind reuse anywhere (bitwise)."""
    diff = torch.zeros(ctx.n_b, dtype=torch.bool)
    for la, lb in zip(kv.layers, ctx.relocated.layers, strict=True):
        for x, y in zip(la, lb, strict=True):
            diff |= (x != y).flatten(1).any(1).cpu()
    return torch.nonzero(diff).flatten().tolist()
