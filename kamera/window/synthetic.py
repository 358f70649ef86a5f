"""Synthetic window items for tiny random models: seeded noise frames with captions, no files.

A stream of ``n_history`` frames (a 4-letter multiple-choice query after them) and ``n_foreign``
frames of "another clip" (other seeds), each frame a random RGB image and a caption, or a caption
alone for text-only families. The model is random, so answers are noise: these items exercise the
probes' identities and costs, not the paper's effects (the trained toy window model does those).
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from kamera.items.spans import Span
from kamera.items.window import WindowItem
from kamera.models.base import Adapter

LETTERS = ("A", "B", "C", "D")


def frame(seed: tuple[int, ...], size: int) -> Image.Image:
    """A deterministic random RGB frame."""
    rng = np.random.default_rng(list(seed))
    return Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8))


def takes_images(adapter: Adapter) -> bool:
    """Whether the adapter encodes image parts (its family has a vision tower)."""
    return adapter.image_processor is not None or getattr(adapter.model.config, "vision_config", None) is not None


def window_item(adapter: Adapter, i: int, window: int = 5, n_history: int | None = None, n_foreign: int = 4,
                seed: int = 0, image_size: int = 112) -> WindowItem:
    """Synthetic window item i for ``adapter`` (history of 2·window + 1 frames by default: enough for every
    probe's stream); it depends only on its arguments and on whether the adapter takes images."""
    if i < 0 or window < 1:
        raise ValueError(f"need i ≥ 0 and window ≥ 1, got i = {i}, window = {window}")
    n_history = 2 * window + 1 if n_history is None else n_history
    images = takes_images(adapter)

    def chunk(j: int, clip: int) -> Span:
        caption = f"{'ab'[clip]}{j}: frame {j} of the clip."  # 1 token a byte on tiny models: n_B > 32 at 112 px
        if not images:
            return Span("A", (f"{caption} object {(7 * j + i + clip) % 10} is colour {(3 * j + seed) % 8}.",))
        return Span("A", (frame((seed, i, clip, j), image_size), caption))

    return WindowItem(
        item_id=item_id(seed, i),
        history=tuple(chunk(j, 0) for j in range(n_history)),
        query=Span("query", ("Colour? A, B, C or D:",)),
        window=window,
        prefix=Span("prefix", ("Answer with a letter.",)),
        foreign=tuple(chunk(j, 1) for j in range(n_foreign)),
        choices=LETTERS, gold=LETTERS[(seed + i) % len(LETTERS)],
    )


def item_id(seed: int, i: int) -> str:
    """The id of synthetic window item i."""
    return f"synthetic-window-{seed}-{i}"


def window_items(adapter: Adapter, n: int, window: int = 5, n_history: int | None = None, n_foreign: int = 4,
                 seed: int = 0, image_size: int = 112) -> list[WindowItem]:
    """``n`` synthetic window items for ``adapter`` (:func:`window_item` 0 … n − 1)."""
    if n < 0:
        raise ValueError(f"need n ≥ 0, got n = {n}")
    return [window_item(adapter, i, window, n_history, n_foreign, seed, image_size) for i in range(n)]
