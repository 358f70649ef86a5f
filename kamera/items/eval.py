"""What the runner needs of a benchmark item, whatever its source (a benchmark loader or the toy task).

An :class:`EvalItem` carries the spans (built lazily, so selecting items decodes no media), the
answer tokens for multiple choice (option letters, or the toy task's answer words), the gold answer
and, for open answers, the benchmark's scorer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kamera.items.spans import Span


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
    answered: Callable[[str], bool] | None = None  # open answers: whether the scorer's parse finds an answer at all
    meta: dict = field(default_factory=dict)
    offset: int = 0  # the absolute position the item (prefix included) is placed at (item_offset, kamera.arms.shape)

    def __post_init__(self) -> None:
        if self.choices is not None and self.gold not in self.choices:
            raise ValueError(f"item {self.item_id}: gold {self.gold!r} is not among choices {self.choices}")
        if self.choices is None and self.score is None:
            raise ValueError(f"item {self.item_id}: an open-answer item needs a scorer")
