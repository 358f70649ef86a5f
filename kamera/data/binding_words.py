"""``binding_words``: the toy binding task in plain words, for any text model's tokenizer.

The toy models (``bench=binding``) read a closed vocabulary of compound tokens; this benchmark asks the same
two questions in ordinary sentences, so the binding gap can be probed on a real checkpoint
(``model=hf model.path=…``). One world binds ``n_entries`` objects to colours (A) and places the same objects,
reordered, at locations (B):

    A        The cup is red. The key is blue. …
    B        The key is in the attic. The cup is in the barn. …
    two_hop  What colour is the object in the attic?   → blue   (needs A and B: blind reuse breaks it)
    control  What colour is the key?                   → blue   (reads A only)
    control_b  Which object is in the barn?            → cup    (reads B only)

Multiple choice with ``n_choices`` options (the gold and distractors drawn from the same world), scored by
letter as every MC benchmark here. Items depend only on (seed, subset, index). No files are read or written.
Options: ``n_entries`` (2–12), ``n_choices`` (2–6), ``n_total`` (rows to draw from).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from kamera.data.base import LoadContext, generated_benchmark, generated_rows, letter_item
from kamera.data.schema import ChunkedItem, PromptTemplate, Unit, layout
from kamera.data.selection import Row

COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "pink", "brown", "black", "white", "grey", "gold")
OBJECTS = ("cup", "hat", "key", "box", "pen", "bag", "book", "lamp", "ball", "coin", "bell", "shoe", "fork", "ring")
LOCATIONS = ("attic", "barn", "kitchen", "garden", "cellar", "garage", "hall", "library", "office", "porch",
             "shed", "studio", "tower", "yard")  # fmt: skip
KINDS = ("two_hop", "control", "control_b")

PROMPT = PromptTemplate(
    source="harness-defined text binding benchmark (the toy binding task in words)",
    prefix="Read the two lists, then answer the question.\n",
    question="\n{question}",
    post="\nAnswer with the option's letter.",
)


def _build(ctx: LoadContext, index: int, n_entries: int, n_choices: int) -> ChunkedItem:
    kind = ctx.subset
    rng = random.Random(f"binding_words:{ctx.seed}:{kind}:{index}")
    objects = rng.sample(OBJECTS, n_entries)
    colour = dict(zip(objects, rng.sample(COLOURS, n_entries), strict=True))
    place = dict(zip(objects, rng.sample(LOCATIONS, n_entries), strict=True))
    placed = objects[:]
    rng.shuffle(placed)  # B lists the same objects in another order, so position in A says nothing
    target = rng.choice(objects)
    if kind == "two_hop":
        question, answer, pool = f"What colour is the object in the {place[target]}?", colour[target], COLOURS
    elif kind == "control":
        question, answer, pool = f"What colour is the {target}?", colour[target], COLOURS
    else:
        question, answer, pool = f"Which object is in the {place[target]}?", target, OBJECTS
    in_world = [colour[o] for o in objects] if pool is COLOURS else objects
    others = [c for c in dict.fromkeys([*in_world, *pool]) if c != answer]  # world's own values first
    options = [answer, *others[: n_choices - 1]]
    rng.shuffle(options)
    a_text = " ".join(f"The {o} is {colour[o]}." for o in objects)
    b_text = " ".join(f"The {o} is in the {place[o]}." for o in placed)
    return letter_item(
        ctx, index,
        segments=layout(PROMPT.prefix, [([Unit("Colours: " + a_text)], False)], [Unit("\nPlaces: " + b_text)]),
        question=question, options=options, answer=answer, prompt=PROMPT,
        meta={"colour": colour, "place": place, "target": target, "answer": answer},
    )

def rows(ctx: LoadContext, *, n_entries: int = 6, n_choices: int = 4, n_total: int | None = None) -> Iterator[Row]:
    """``n_total`` generated rows per subset (default ``max(64, n_items)``), built lazily on selection."""
    if not 2 <= n_entries <= min(len(OBJECTS), len(LOCATIONS), len(COLOURS)):
        raise ValueError(f"n_entries must be 2..{len(COLOURS)}, got {n_entries}")
    if not 2 <= n_choices <= min(6, n_entries):
        raise ValueError(f"n_choices must be 2..min(6, n_entries={n_entries}), got {n_choices}")
    return generated_rows(ctx, n_total, lambda i: _build(ctx, i, n_entries, n_choices))

SPEC = generated_benchmark("binding_words", rows, KINDS)
