"""``window_synthetic``: synthetic window items for tiny random models, seeded noise frames with captions, no files.

A stream of ``n_history`` frames (a 4-letter multiple-choice query after them) and ``n_foreign``
frames of "another clip" (other seeds), each frame a random RGB image and a caption, or a caption
alone for text-only families. The model is random, so answers are noise: these items exercise the
probes' identities and costs, not the paper's effects (the trained toy window model does those).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
from PIL import Image

from kamera.items.selection import Selection
from kamera.items.spans import Span
from kamera.items.window import WindowEntry, WindowItem
from kamera.knobs import is_int
from kamera.models.base import Adapter
from kamera.window.benches.base import Read, WindowBench

LETTERS = ("A", "B", "C", "D")


def frame(seed: tuple[int, ...], size: int) -> Image.Image:
    """A deterministic random RGB frame."""
    rng = np.random.default_rng(list(seed))
    return Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8))


def window_item(adapter: Adapter, i: int, window: int = 5, n_history: int | None = None, n_foreign: int = 4,
                seed: int = 0, image_size: int = 112) -> WindowItem:
    """Synthetic window item i for ``adapter`` (history of 2·window + 1 frames by default: enough for every
    probe's stream); it depends only on its arguments and on whether the adapter takes images."""
    if i < 0 or window < 1:
        raise ValueError(f"need i ≥ 0 and window ≥ 1, got i = {i}, window = {window}")
    n_history = 2 * window + 1 if n_history is None else n_history
    images = adapter.reads_images

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


def _build(i: int, seed: int, opts: dict, adapter: Adapter) -> WindowItem:
    return window_item(adapter, i, opts["window"], opts["n_history"], opts["n_foreign"], seed, opts["image_size"])


@dataclass(frozen=True)
class SyntheticWindowBench(WindowBench):
    """Seeded noise frames with captions (text captions alone for text-only families)."""

    def problems(self, model: str, opts: dict) -> list[str]:
        p = [f"bench.kwargs.{k}={opts[k]!r}: must be an integer >= {low}"
             for k, low in (("window", 1), ("n_foreign", 0), ("image_size", 28)) if not is_int(opts[k], low)]
        if opts["n_history"] is not None and not is_int(opts["n_history"], 2):
            p.append(f"bench.kwargs.n_history={opts['n_history']!r}: must be null (2·window + 1) or an integer >= 2")
        return p

    def select(self, subsets: list[str], split: str, seed: int, n: int | None, opts: dict, read: Read) -> Selection:
        (subset,) = subsets
        count = 8 if n is None else n
        entries = [WindowEntry(item_id(seed, i), subset, split, item_id(seed, i),
                               partial(_build, i, seed, opts)) for i in range(count)]
        return Selection(entries, n_requested=n, report=f"{count} synthetic window streams")


SPEC = SyntheticWindowBench("window_synthetic", ("synthetic",), ("synthetic",), "synthetic",
                            {"window": 5, "n_history": None, "n_foreign": 4, "image_size": 112})
