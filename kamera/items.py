"""What the runner needs of a benchmark item, whatever its source (a benchmark loader or the toy task).

An :class:`EvalItem` carries the spans (built lazily, so selecting items decodes no media), the
answer tokens for multiple choice (option letters, or the toy task's answer words), the gold answer
and, for open answers, the benchmark's scorer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kamera.spans import Span


@dataclass
class EvalItem:
    """One item as the runner sees it."""

    item_id: str
    subset: str
    split: str
    cluster_key: str
    spans: Callable[[], list[Span]]
    choices: list[str] | None  # first-answer-token strings (MC); None = open answer, greedy-decoded
    gold: str
    score: Callable[[str], float] | None = None  # open answers: prediction text → score in [0, 1]
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.choices is not None and self.gold not in self.choices:
            raise ValueError(f"item {self.item_id}: gold {self.gold!r} is not among choices {self.choices}")
        if self.choices is None and self.score is None:
            raise ValueError(f"item {self.item_id}: an open-answer item needs a scorer")


def from_chunked(item) -> EvalItem:
    """A ``kamera.data.ChunkedItem`` as an EvalItem (letters for MC, the benchmark scorer otherwise)."""
    from kamera.data import score

    letters = item.choice_letters
    mc = item.answer_format == "letter" and bool(letters)
    return EvalItem(
        item_id=str(item.item_id),
        subset=str(item.subset),
        split=str(item.split),
        cluster_key=str(item.cluster_key),
        spans=item.spans,
        choices=list(letters) if mc else None,
        gold=str(item.gold_letter if mc else item.gold_norm),
        score=None if mc else (lambda text, item=item: float(score(item, text))),
        meta={"answer_format": item.answer_format, "scorer": item.scorer},
    )


def toy_items(adapter, n_items: int | None, seed: int, subset: str | None = None) -> list[EvalItem]:
    """Held-out items of the toy binding task (``bench=binding``) in the form ``adapter`` was trained on.

    ``adapter`` must be a toy model (it carries ``task`` and ``variant``: text words or drawn images);
    ``subset`` names the query kinds, comma-separated (two_hop, control, control_b; default two_hop);
    ``n_items`` items are drawn per kind.
    """
    from kamera.toy.task import items

    if not hasattr(adapter, "task"):
        raise ValueError(f"bench=binding needs a toy model (toy_binding, toy_binding_text), not {adapter.name}")
    out = []
    for kind in (subset or "two_hop").split(","):
        for it in items(adapter.task, kind.strip(), 64 if n_items is None else n_items, seed, adapter.variant):
            out.append(EvalItem(
                item_id=it.item_id, subset=it.kind, split="heldout", cluster_key=it.item_id, spans=it.spans,
                choices=list(it.choices), gold=it.answer, meta={"variant": adapter.variant},
            ))
    return out
