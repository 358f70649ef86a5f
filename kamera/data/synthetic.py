"""``synthetic``: a deterministic, seed-driven multimodal binding benchmark generated in memory.

Each item: a short prefix; 1–3 A chunks ("Key k: " + an image binding two shapes to colours); one B
chunk ("Board: " + a 2×2 grid of grey shapes); a multiple-choice question asking the colour of the
shape in one grid cell. The answer needs both: B says which shape sits in the cell, A gives its colour.
Distractor options are the colours of the other keyed shapes, so neither chunk alone suffices.

Images are small (``image_size`` 56 → 4 visual tokens at 14-px patches with 2×2 merge) and the text
stays near 200 characters, so tiny models run an item in milliseconds. No files are read or written.
Options: ``n_a_chunks`` (1–3), ``image_size``, ``n_choices`` (2–6), ``n_total`` (rows to draw from).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from PIL import Image, ImageDraw

from kamera.data.base import LoadContext, check_within, generated_benchmark, generated_rows, letter_item
from kamera.data.fixtures import png_bytes
from kamera.data.schema import ChunkedItem, MediaRef, PromptTemplate, Unit, layout
from kamera.data.selection import Row

SHAPES = ("circle", "square", "triangle", "diamond", "cross", "ring")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (50, 80, 220),
    "yellow": (235, 200, 30),
    "purple": (140, 60, 180),
    "orange": (245, 140, 30),
}
CELLS = ("top-left", "top-right", "bottom-left", "bottom-right")

PROMPT = PromptTemplate(
    source="harness-defined synthetic benchmark",
    prefix="Keys give each shape a colour; the board places shapes.\n",
    question="\n{question}",
    post="\nAnswer with the option's letter.",
)


def _draw(draw: ImageDraw.ImageDraw, shape: str, box: tuple[float, float, float, float], fill: tuple) -> None:
    x0, y0, x1, y1 = box
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=fill)
    elif shape == "diamond":
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=fill)
    elif shape == "cross":
        t = (x1 - x0) / 6
        draw.rectangle((cx - t, y0, cx + t, y1), fill=fill)
        draw.rectangle((x0, cy - t, x1, cy + t), fill=fill)
    else:  # ring
        t = (x1 - x0) / 5
        draw.ellipse(box, fill=fill)
        draw.ellipse((x0 + t, y0 + t, x1 - t, y1 - t), fill=(255, 255, 255))


def _key_image(pairs: list[tuple[str, str]], size: int) -> Image.Image:
    """Shapes side by side, each in its colour: the object→colour bindings."""
    img = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(img)
    w = size / len(pairs)
    for i, (shape, colour) in enumerate(pairs):
        m = w * 0.12
        _draw(
            d,
            shape,
            (i * w + m, size / 2 - w / 2 + m, (i + 1) * w - m, size / 2 + w / 2 - m),
            COLOURS[colour],
        )
    return img


def _board_image(cells: list[str | None], size: int) -> Image.Image:
    """A 2×2 grid with grey shapes (no colour information): the object→location bindings."""
    img = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(img)
    h = size / 2
    d.line((h, 0, h, size), fill=(0, 0, 0))
    d.line((0, h, size, h), fill=(0, 0, 0))
    for i, shape in enumerate(cells):
        if shape is not None:
            x, y, m = (i % 2) * h, (i // 2) * h, h * 0.15
            _draw(d, shape, (x + m, y + m, x + h - m, y + h - m), (90, 90, 90))
    return img


def _build(ctx: LoadContext, index: int, n_a_chunks: int, image_size: int, n_choices: int) -> ChunkedItem:
    rng = random.Random(f"synthetic:{ctx.seed}:{index}")
    shapes = rng.sample(SHAPES, 2 * n_a_chunks)
    colours = dict(zip(shapes, rng.sample(list(COLOURS), len(shapes)), strict=True))
    keyed = [[(s, colours[s]) for s in shapes[2 * k : 2 * k + 2]] for k in range(n_a_chunks)]
    placed = rng.sample(shapes, min(4, len(shapes)))
    cells: list[str | None] = [*placed, *[None] * (4 - len(placed))]
    rng.shuffle(cells)
    target_cell = rng.choice([i for i, s in enumerate(cells) if s is not None])
    answer = colours[cells[target_cell]]  # type: ignore[index]
    others = [c for c in dict.fromkeys([*(colours[s] for s in shapes), *COLOURS]) if c != answer]
    options = [answer, *others[: n_choices - 1]]
    rng.shuffle(options)
    a_chunks = [
        (
            [
                Unit(
                    f"Key {k + 1}: ",
                    MediaRef("image", f"key[{k}]", data=png_bytes(_key_image(pairs, image_size))),
                )
            ],
            False,
        )
        for k, pairs in enumerate(keyed)
    ]
    board = MediaRef("image", "board", data=png_bytes(_board_image(cells, image_size)))
    item = letter_item(
        ctx, index, segments=layout(PROMPT.prefix, a_chunks, [Unit("Board: ", board)]),
        question=f"What colour is the shape in the {CELLS[target_cell]} cell?", options=options, answer=answer,
        prompt=PROMPT, meta={"bindings": colours, "board": cells, "cell": CELLS[target_cell], "answer_colour": answer},
    )
    item.validate(expected_media=[*(f"key[{k}]" for k in range(n_a_chunks)), "board"])
    return item


def rows(
    ctx: LoadContext,
    *,
    n_a_chunks: int = 2,
    image_size: int = 56,
    n_choices: int = 4,
    n_total: int | None = None,
) -> Iterator[Row]:
    """``n_total`` generated rows (default: ``max(64, n_items)``), built lazily on selection."""
    check_within("n_a_chunks", n_a_chunks, 1, 3)
    check_within("n_choices", n_choices, 2, len(COLOURS))
    if image_size < 28:
        raise ValueError(f"image_size must be >= 28, got {image_size}")
    return generated_rows(ctx, n_total, lambda i: _build(ctx, i, n_a_chunks, image_size, n_choices))

SPEC = generated_benchmark("synthetic", rows)
