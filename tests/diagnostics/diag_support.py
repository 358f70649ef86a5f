"""Helpers shared by the diagnostics tests: cached contexts (their shared forwards run once per session),
the toy binding model's items, and a synthetic video (a bright square sliding over a flat background)."""

from __future__ import annotations

import numpy as np
from PIL import Image
from tinyfamilies import standard_spans

from kamera.items.spans import Span
from kamera.models import load_model
from kamera.reuse.context import ReuseContext
from kamera.toy.items import toy_items

_CONTEXTS: dict[tuple, ReuseContext] = {}
SQUARE_ROWS = (40, 72)  # pixel rows of the moving square in a 112-px frame


def context(tiny, name: str, canonical_context: str = "prefix") -> ReuseContext:
    """The standard [prefix, A, A, B, query] item of a tiny family (cached per session)."""
    key = ("tiny", name, canonical_context)
    if key not in _CONTEXTS:
        adapter = tiny(name)
        _CONTEXTS[key] = ReuseContext(adapter, standard_spans(adapter), canonical_context=canonical_context)
    return _CONTEXTS[key]


def toy_contexts(n: int = 3) -> list[ReuseContext]:
    """Held-out two-hop items of the shipped toy binding model (image variant)."""
    key = ("toy", n)
    if key not in _CONTEXTS:
        adapter = load_model("toy_binding")
        _CONTEXTS[key] = [ReuseContext(adapter, it.spans()) for it in toy_items(adapter, n, seed=0)]
    return _CONTEXTS[key]


def video_frame(t: int, px: int = 112) -> Image.Image:
    """Frame t: a flat grey background with a bright 32-px square at x = 8 + 10·t."""
    img = np.full((px, px, 3), 90, np.uint8)
    x = 8 + 10 * t
    img[SQUARE_ROWS[0] : SQUARE_ROWS[1], x : x + 32] = 250
    return Image.fromarray(img)


def video_spans(b_frames: tuple[int, ...] = (2, 3, 3)) -> list[Span]:
    """[prefix, A (frames 0, 1), B (``b_frames``), query]; each frame after a short caption."""

    def frames(ts):
        return tuple(p for t in ts for p in (f"f{t}", video_frame(t)))

    return [Span("prefix", ("Watch.",)), Span("A", frames((0, 1))), Span("B", frames(b_frames)),
            Span("query", ("Where is it? Answer:",))]
