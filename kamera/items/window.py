"""The window item: a history of chunks, a window size, a query, and the chunks of another clip.

A windowed agent sees a stream c₁ … c_T (video segments, frames, pages) through a window of k chunks
(paper §5). A :class:`WindowItem` carries that stream once; the window operations
(:mod:`kamera.window.ops`) pick which chunks sit in the window, in which order, and which one is the
chunk under test, as a :class:`~kamera.window.ops.Layout` of chunk ids.

A :class:`WindowEntry` is one selected window item before it is built: the ids the store keys it by and
the builder the runner calls with the loaded model, so selection needs no weights.

Chunk ids: history chunk i is id i (0-based); ``foreign`` chunk j (another clip's frames, for the
drift probes of App. D) is id T + j. Roles of the given spans are ignored: a window assigns them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kamera.items.spans import Span

Answer = Callable[[tuple[int, ...]], "str | None"]


@dataclass(frozen=True)
class WindowItem:
    """One stream and one question about it.

    ``gold`` is the answer string, or a function of the window (chunk ids in order, the chunk under
    test included) returning the answer for that window, or None where the window leaves it undefined
    (the toy window task: a recalled chunk's answer depends on which bindings the window holds).
    ``choices`` are the first-answer-token strings of a multiple-choice query (letters, or answer
    words); None means open answers, compared by greedy decoding where a probe decodes.
    """

    item_id: str
    history: tuple[Span, ...]
    query: Span
    window: int
    prefix: Span | None = None
    foreign: tuple[Span, ...] = ()
    choices: tuple[str, ...] | None = None
    gold: str | Answer | None = None
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.history:
            raise ValueError(f"window item {self.item_id}: the history holds no chunks")
        for what, spans in (("history", self.history), ("foreign", self.foreign)):
            for i, s in enumerate(spans):
                if not isinstance(s, Span):
                    raise TypeError(f"window item {self.item_id}: {what}[{i}] is a {type(s).__name__}, not a Span")
                if s.is_empty():
                    raise ValueError(f"window item {self.item_id}: {what}[{i}] is an empty chunk")
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
            raise ValueError(f"window item {self.item_id}: window must be an int ≥ 1, got {self.window!r}")
        if self.query.role != "query":
            raise ValueError(f"window item {self.item_id}: the query span has role {self.query.role!r}, not 'query'")
        if self.prefix is not None and self.prefix.role != "prefix":
            raise ValueError(f"window item {self.item_id}: the prefix span has role {self.prefix.role!r}, not 'prefix'")
        if self.choices is not None:
            if len(set(self.choices)) != len(self.choices) or len(self.choices) < 2:
                raise ValueError(
                    f"window item {self.item_id}: choices must be ≥ 2 distinct strings, got {self.choices}"
                )
            if isinstance(self.gold, str) and self.gold not in self.choices:
                raise ValueError(f"window item {self.item_id}: gold {self.gold!r} is not among choices {self.choices}")

    @property
    def n_history(self) -> int:
        return len(self.history)

    @property
    def chunks(self) -> tuple[Span, ...]:
        """Every chunk by id: the history, then the foreign chunks."""
        return (*self.history, *self.foreign)

    def foreign_id(self, j: int) -> int:
        """The chunk id of foreign chunk j."""
        if not 0 <= j < len(self.foreign):
            raise IndexError(f"window item {self.item_id} has {len(self.foreign)} foreign chunk(s), asked for {j}")
        return self.n_history + j

    def answer(self, window: Sequence[int]) -> str | None:
        """The gold answer for a window (chunk ids in order), or None where it is undefined or unknown."""
        if self.gold is None or isinstance(self.gold, str):
            return self.gold
        return self.gold(tuple(window))


def from_spans(
    item_id: str,
    spans: Sequence[Span],
    window: int,
    choices: Sequence[str] | None = None,
    gold: str | None = None,
    foreign: Sequence[Span] = (),
    meta: dict | None = None,
) -> WindowItem:
    """A window item from a chunked item's spans ``[prefix?, chunk…, query]`` (the A and B spans of a
    benchmark item, in order, are the history; e.g. Video-MME frames grouped into segments)."""
    spans = list(spans)
    if not spans or spans[-1].role != "query":
        raise ValueError(f"window item {item_id}: spans must end with the query span")
    prefix = spans[0] if spans[0].role == "prefix" else None
    history = spans[1 if prefix else 0 : -1]
    return WindowItem(
        item_id,
        tuple(history),
        spans[-1],
        window,
        prefix,
        tuple(foreign),
        None if choices is None else tuple(choices),
        gold,
        dict(meta or {}),
    )


@dataclass(frozen=True)
class WindowEntry:
    """One selected window item before it is built: what the store keys it by and how to build it
    (``build(adapter)``: the loaded model's adapter → the :class:`WindowItem`)."""

    item_id: str
    subset: str
    split: str
    cluster_key: str
    build: Callable[[object], WindowItem]
    meta: dict = field(default_factory=dict)
