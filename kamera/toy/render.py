"""The image form of the binding task: A and B drawn as grids of 28-px cells, one visual token per cell.

A cell is exactly one merged Qwen2.5-VL token (2×2 patches of 14 px). Its top half shows a glyph (a
fixed random bit pattern per object or location), its bottom half a colour swatch:

    A image   K cells                (object glyph, its colour)       one binding per token, as in text
    B image   K (location, object) pairs side by side, 4 pairs a row  location glyph | object glyph over grey

The toy vision tower attends within one cell only (window = one merged token, no full-attention
block), so an object cell of B does not see its location neighbour before the language model, which
keeps the two-hop route through B's layer-1 states, as in the text form.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from PIL import Image

from kamera.toy.task import COLOURS, LOCATIONS, OBJECTS, World

CELL = 28  # pixels per cell = one merged visual token
PAIRS_PER_ROW = 4
A_COLUMNS = 4
GLYPH_SEED = 0x9_1F
GREY = (128, 128, 128)
RGB = dict(zip(COLOURS, [
    (230, 25, 25), (30, 60, 230), (30, 180, 60), (250, 220, 30), (140, 40, 190), (250, 130, 10),
    (250, 150, 200), (120, 70, 20), (10, 10, 10), (245, 245, 245), (150, 150, 150), (200, 160, 20),
    (20, 220, 230), (120, 130, 20), (10, 20, 110), (0, 120, 120),
], strict=True))  # fmt: skip


@cache
def glyphs() -> dict[str, np.ndarray]:
    """A fixed random 7×14 bit pattern per object and location, drawn at 2 px per bit (14 × 28 px)."""
    rng = np.random.default_rng(GLYPH_SEED)
    bits = rng.integers(0, 2, (len(OBJECTS) + len(LOCATIONS), 7, 14), dtype=np.uint8)
    pixels = bits.repeat(2, axis=1).repeat(2, axis=2) * np.uint8(255)
    return dict(zip([*OBJECTS, *LOCATIONS], pixels, strict=True))


Cell = tuple[str | None, tuple[int, int, int] | None]  # (glyph, swatch colour); (None, None) is blank
BLANK: Cell = (None, None)


def draw(c: Cell) -> np.ndarray:
    """One 28 × 28 RGB cell: the glyph in white on black over the top half, the swatch filling the bottom half."""
    glyph, swatch = c
    out = np.zeros((CELL, CELL, 3), dtype=np.uint8)
    if glyph is not None:
        out[: CELL // 2] = glyphs()[glyph][..., None]
    if swatch is not None:
        out[CELL // 2 :] = swatch
    return out


def grid_cells(n: int, columns: int) -> int:
    """Cells of a grid holding ``n`` cells, ``columns`` a row (the last row padded)."""
    return -(-n // columns) * columns


def pad(cells: list[Cell], columns: int) -> list[Cell]:
    """``cells`` with blank cells appended to fill the last row."""
    return cells + [BLANK] * (grid_cells(len(cells), columns) - len(cells))


def grid(cells: list[Cell], columns: int) -> Image.Image:
    """Cells drawn in raster order, ``columns`` a row, the last row padded with blank cells."""
    padded = [draw(c) for c in pad(cells, columns)]
    rows = [np.concatenate(padded[r : r + columns], 1) for r in range(0, len(padded), columns)]
    return Image.fromarray(np.concatenate(rows))


def a_cells(world: World) -> list[Cell]:
    """A: one cell per entry, the object's glyph over its colour."""
    return [(o, RGB[c]) for o, c in world.a]


def b_cells(world: World) -> list[Cell]:
    """B: per entry a location cell (glyph, no swatch) then an object cell (glyph over grey)."""
    return [c for loc, o in world.b for c in ((loc, None), (o, GREY))]


def a_image(world: World) -> Image.Image:
    return grid(a_cells(world), A_COLUMNS)


def b_image(world: World) -> Image.Image:
    return grid(b_cells(world), 2 * PAIRS_PER_ROW)
