"""Helpers shared by the arm tests.

The standard item and the family list come from ``tests/tinyfamilies.py``.
"""

from __future__ import annotations

import torch
from tinyfamilies import standard_spans

from kamera.core import ChunkKV
from kamera.reuse.context import ReuseContext

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
