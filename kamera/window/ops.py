"""Window operations as layouts: which chunks a window holds, in which order, and the chunk under test.

A :class:`Layout` is a window as the query reads it, ``[prefix · before… · target · after… · query]``,
in chunk ids of a :class:`~kamera.items.window.WindowItem`. Each operation (paper §5, App. D) maps the
window before it to the window after it; the reference for every operation is the re-prefill of the
layout it produces, and the probes (:mod:`kamera.window.probes`) build the target chunk's KV for
that layout in the ways they compare.

- :func:`slide`: evict the leading chunk, admit the next behind the window.
- :func:`recall_window`: the window in front of a recalled chunk after a fraction τ of it turned over.
- :func:`reorder`: a permutation of the chunks in front of the target.
- drift: :func:`replace` (a chunk by another clip's), :func:`drop_duplicate`, :func:`add_distractors`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace as _replace


@dataclass(frozen=True)
class Layout:
    """A window: chunk ids ``before`` the target, the ``target``, and ids ``after`` it.

    ``gap`` skips that many positions between the prefix and the first chunk (a position-matched layout
    without the chunks that would sit there); ``masked`` are indices into ``before`` whose tokens no later
    token attends (a 4D mask: a chunk present at its positions but never read, e.g. an evicted chunk that
    left no influence).
    """

    before: tuple[int, ...]
    target: int
    after: tuple[int, ...] = ()
    gap: int = 0
    masked: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        ids = self.window
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in ids):
            raise ValueError(f"a layout's chunk ids must be ints ≥ 0, got {ids}")
        if self.gap < 0:
            raise ValueError(f"gap must be ≥ 0, got {self.gap}")
        if any(not 0 <= m < len(self.before) for m in self.masked) or len(set(self.masked)) != len(self.masked):
            raise ValueError(
                f"masked must be distinct indices into before ({len(self.before)} chunks), got {self.masked}"
            )

    @property
    def window(self) -> tuple[int, ...]:
        """Every chunk id in window order."""
        return (*self.before, self.target, *self.after)


def slide(layout: Layout, admit: int | None = None) -> Layout:
    """Evict the leading chunk and admit ``admit`` at the back of the window (after the target if it is last).

    The leading chunk must sit in front of the target (the target survives the slide)."""
    if not layout.before:
        raise ValueError("slide: the target is the leading chunk; sliding would evict it")
    if layout.masked or layout.gap:
        raise ValueError("slide: a masked or gapped layout is a probe construction, not a window to slide")
    after = layout.after if admit is None else (*layout.after, admit)
    return Layout(layout.before[1:], layout.target, after)


def turnover_count(tau: float, k: int) -> int:
    """The number of the window's k chunks a turnover fraction τ replaces (τ must be a multiple of 1/k)."""
    if not 0 <= tau <= 1:
        raise ValueError(f"turnover τ must be in [0, 1], got {tau}")
    n = round(tau * k)
    if not math.isclose(n, tau * k, abs_tol=1e-9):
        raise ValueError(f"turnover τ = {tau} is not a multiple of 1/k for a window of k = {k} chunks")
    return n


def recall_window(old: Sequence[int], new: Sequence[int], n: int) -> tuple[int, ...]:
    """The window in front of a recalled chunk after n of its k chunks turned over.

    The recalled chunk was conditioned on ``old`` (k chunks) when it was evicted; the window has since slid
    n times, so its n oldest chunks left and n later ones (``new[:n]``) arrived behind the rest: the window
    is ``old[n:] + new[:n]``. n = 0 is the eviction-time window, n = k a window with nothing in common."""
    if len(new) < n or not 0 <= n <= len(old):
        raise ValueError(f"turnover n must be in 0..{len(old)} with ≥ n later chunks; got n = {n}, {len(new)} later")
    return (*old[n:], *new[:n])


def reorder(layout: Layout, perm: Sequence[int]) -> Layout:
    """The chunks in front of the target in the order ``perm`` (a permutation of 0 … len(before) − 1)."""
    if sorted(perm) != list(range(len(layout.before))):
        raise ValueError(
            f"reorder: {tuple(perm)} is not a permutation of the {len(layout.before)} chunks before the target"
        )
    return _replace(layout, before=tuple(layout.before[i] for i in perm))


def replace(layout: Layout, slot: int, chunk: int) -> Layout:
    """The chunk at index ``slot`` of ``before`` replaced by ``chunk`` (e.g. another clip's frame)."""
    if not 0 <= slot < len(layout.before):
        raise ValueError(f"replace: slot {slot} is not in the {len(layout.before)} chunks before the target")
    before = list(layout.before)
    before[slot] = chunk
    return _replace(layout, before=tuple(before))


def drop_duplicate(layout: Layout, drop: int, dup: int) -> Layout:
    """Drop the chunk at index ``drop`` of ``before`` and repeat the one at index ``dup`` in its slot."""
    if drop == dup:
        raise ValueError("drop_duplicate: the dropped and the duplicated chunk must differ")
    return replace(layout, drop, layout.before[dup])


def add_distractors(layout: Layout, chunks: Sequence[int]) -> Layout:
    """``chunks`` placed at the front of the window, ahead of everything in front of the target."""
    return _replace(layout, before=(*chunks, *layout.before))
