"""Held-out items of the toy binding task: :class:`ToyItem` (a world and one query, as spans) and the same
items as the runner's :class:`~kamera.items.eval.EvalItem` (``bench=binding``).

Kept apart from :mod:`kamera.toy.task` (worlds and the vocabulary) because an image item's spans are drawn
by :mod:`kamera.toy.render`, which itself reads the task's worlds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kamera.items.eval import EvalItem
from kamera.items.spans import Span
from kamera.toy.render import a_image, b_image
from kamera.toy.task import DEFAULT_VARIANT, HELDOUT, KINDS, PREFIX, QUERY_WORD, VARIANTS, TaskSpec, World


@dataclass(frozen=True)
class ToyItem:
    """One held-out item: a world and one query; ``choices`` are answer words, ``gold`` indexes them.

    ``variant`` "text" writes A and B as words, "image" draws them as pictures (:mod:`kamera.toy.render`).
    """

    item_id: str
    kind: str
    world: World
    argument: str
    answer: str
    variant: str = DEFAULT_VARIANT

    @property
    def choices(self) -> tuple[str, ...]:
        return self.world.spec.objects if self.kind == "control_b" else self.world.spec.colours

    @property
    def gold(self) -> int:
        return self.choices.index(self.answer)

    @property
    def query_text(self) -> str:
        return f"{QUERY_WORD[self.kind]} {self.argument}"

    def spans(self) -> list[Span]:
        """``[prefix, A, B, query]``; A and B are words, or a marker word and a picture."""
        w = self.world
        if self.variant == "image":
            a, b = ("A:", a_image(w)), ("B:", b_image(w))
        else:
            a, b = (w.a_text(),), (w.b_text(),)
        return [
            Span("prefix", (PREFIX,), "prefix"),
            Span("A", a, "A"),
            Span("B", b, "B"),
            Span("query", (self.query_text,), self.kind),
        ]


def items(spec: TaskSpec, kind: str, n: int, seed: int = 0, variant: str = DEFAULT_VARIANT) -> list[ToyItem]:
    """``n`` held-out items of one kind; item i depends only on (seed, kind, i), never on the training stream."""
    if kind not in KINDS:
        raise ValueError(f"query kind must be one of {KINDS}, got {kind!r}")
    if variant not in VARIANTS:
        raise ValueError(f"toy variant must be one of {VARIANTS}, got {variant!r}")
    if n < 0:
        raise ValueError(f"n must be ≥ 0, got {n}")
    out = []
    for i in range(n):
        rng = np.random.default_rng([HELDOUT, seed, KINDS.index(kind), i])
        world = World.sample(spec, rng)
        arg, ans = world.question(kind, rng)
        out.append(ToyItem(f"{kind}-{seed}-{i}", kind, world, arg, ans, variant))
    return out


def toy_items(adapter, n_items: int | None, seed: int, subset: str | None = None) -> list[EvalItem]:
    """Held-out items of the toy binding task (``bench=binding``) in the form ``adapter`` was trained on.

    ``adapter`` must be a toy model (it carries ``task`` and ``variant``: text words or drawn images);
    ``subset`` names the query kinds, comma-separated (two_hop, control, control_b; default two_hop);
    ``n_items`` items are drawn per kind.
    """
    if not hasattr(adapter, "task"):
        raise ValueError(f"bench=binding needs a toy model (toy_binding, toy_binding_text), not {adapter.name}; "
                         "bench=binding_words asks the same task in words of any text model")
    out = []
    for kind in (subset or "two_hop").split(","):
        for it in items(adapter.task, kind.strip(), 64 if n_items is None else n_items, seed, adapter.variant):
            out.append(EvalItem(
                item_id=it.item_id, subset=it.kind, split="heldout", cluster_key=it.item_id, spans=it.spans,
                choices=list(it.choices), gold=it.answer, meta={"variant": adapter.variant},
            ))
    return out
