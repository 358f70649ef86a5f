"""A content-addressed KV store with a byte budget: what a position-free cache keeps between an agent's steps.

Entries are keyed by what they were computed from, never by where they sit: a chunk's content digest
(:func:`chunk_digest`: its token ids and input embeddings, images' features included) and, for a patch, the
digests of the antecedent chunks it was formed behind: in order (``patch``), or as a multiset (``orbit``, one
patch serving every order of the set). So a patch formed behind one antecedent is never served behind another,
whatever ids the trace gives them. Every entry carries its bytes (what a deployment stores) and the tokens it
would cost to rebuild; ``capacity`` bounds the bytes held, and the ``eviction`` rule picks what goes:

    lru    the least recently used entry
    cost   the entry with the fewest rebuild tokens per byte (ties: least recently used)

Entries the current step has used are evicted last. Reads and writes are counted in bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

EVICTIONS = ("lru", "cost")


def chunk_digest(*tensors: torch.Tensor | None) -> str:
    """A chunk's content digest: sha256 of what the model reads of it (token ids, input embeddings with images'
    features, local positions, deepstack features), in the order given; None entries are skipped."""
    h = hashlib.sha256()
    for t in tensors:
        if t is not None:
            t = t.detach().cpu()
            h.update(str((t.dtype, tuple(t.shape))).encode())
            h.update((t.float() if t.is_floating_point() else t.to(torch.int64)).numpy().tobytes())
    return h.hexdigest()[:16]


def canonical_key(chunk: str) -> tuple:
    """KV(c|∅) of the chunk with digest ``chunk``."""
    return ("canonical", chunk)


def patch_key(chunk: str, antecedents: Sequence[str]) -> tuple:
    """The chunk's patch formed behind exactly these antecedents, in this order."""
    return ("patch", chunk, tuple(antecedents))


def orbit_key(chunk: str, antecedents: Sequence[str]) -> tuple:
    """The chunk's patch for its antecedents as a set (any order of the same multiset)."""
    return ("orbit", chunk, tuple(sorted(antecedents)))


@dataclass
class Entry:
    value: object
    nbytes: int
    tokens: int  # what rebuilding it costs, in prefilled tokens
    used: int  # the tick of its last use


class Store:
    """Entries by key with a byte ``capacity`` (None: unbounded) and an ``eviction`` rule; counts bytes and
    evictions."""

    def __init__(self, capacity: int | None = None, eviction: str = "lru") -> None:
        if eviction not in EVICTIONS:
            raise ValueError(f"eviction={eviction!r}: one of {list(EVICTIONS)}")
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity={capacity!r}: bytes >= 0 (or None: unbounded)")
        self.capacity, self.eviction = capacity, eviction
        self.entries: dict[Hashable, Entry] = {}
        self.tick = 0
        self.step_start = 0
        self.bytes_read = self.bytes_written = self.evictions = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self.entries

    @property
    def held(self) -> int:
        """Bytes held now."""
        return sum(e.nbytes for e in self.entries.values())

    def begin_step(self) -> None:
        """Mark a new step: entries used from now on are this step's (evicted last)."""
        self.tick += 1
        self.step_start = self.tick

    def get(self, key: Hashable) -> object | None:
        """The value under ``key`` (None if absent); a hit counts its bytes as read."""
        e = self.entries.get(key)
        if e is None:
            return None
        self.tick += 1
        e.used = self.tick
        self.bytes_read += e.nbytes
        return e.value

    def put(self, key: Hashable, value: object, nbytes: int, tokens: int) -> bool:
        """Store ``value`` (``nbytes``, rebuilt for ``tokens``), evicting by the rule to fit; False (nothing stored)
        when it alone exceeds the capacity."""
        if self.capacity is not None and nbytes > self.capacity:
            return False
        self.tick += 1
        self.entries.pop(key, None)
        self.entries[key] = Entry(value, nbytes, tokens, self.tick)
        self.bytes_written += nbytes
        while self.capacity is not None and self.held > self.capacity:
            self._evict(protect=key)
        return True

    def _evict(self, protect: Hashable) -> None:
        def rank(item: tuple[Hashable, Entry]) -> tuple:
            _, e = item
            this_step = e.used >= self.step_start
            if self.eviction == "lru":
                return (this_step, e.used)
            return (this_step, e.tokens / max(e.nbytes, 1), e.used)

        key, _ = min(((k, e) for k, e in self.entries.items() if k != protect), key=rank)
        del self.entries[key]
        self.evictions += 1
