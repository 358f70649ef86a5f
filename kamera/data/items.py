"""A benchmark's :class:`~kamera.data.schema.ChunkedItem` as the runner's :class:`~kamera.items.eval.EvalItem`."""

from __future__ import annotations

from kamera.data.schema import ChunkedItem
from kamera.data.scorers import has_answer, score
from kamera.items.eval import EvalItem


def from_chunked(item: ChunkedItem) -> EvalItem:
    """A ``kamera.data.ChunkedItem`` as an EvalItem (letters for MC, the benchmark scorer otherwise)."""
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
        answered=None if mc else (lambda text, item=item: has_answer(item, text)),
        meta={"answer_format": item.answer_format, "scorer": item.scorer},
    )
