"""``prefix``: a prefix (radix) cache, the semantics of vLLM's automatic prefix caching.

Each chunk's KV is stored under the digests of the whole prefix of chunks up to it (a radix node); a step
reuses the longest run of leading chunks whose nodes are all stored and prefills the rest in one forward behind
it. Reuse is exact by construction (same tokens at the same positions), so it pays exactly where the window's
head changes: a slide, a reorder or a revisit re-prefills from the first changed chunk on."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.agent.policies.base import Policy, register
from kamera.agent.session import Session
from kamera.core import ChunkKV
from kamera.window.context import WindowView


def node(s: Session, order: tuple[int, ...], j: int) -> tuple:
    """The radix node of slot j: the digests of chunks 0 … j in order."""
    return ("prefix", s.antecedents(order, j + 1))


@register
@dataclass
class Prefix(Policy):
    """Longest stored leading prefix reused, the rest prefilled."""

    name = "prefix"

    def build(self, s: Session, view: WindowView, order: tuple[int, ...]) -> list[ChunkKV]:
        kvs: list[ChunkKV] = []
        for j in range(len(order)):
            kv = s.store.get(node(s, order, j))
            if kv is None:
                break
            kvs.append(kv)
        s.meter.actions["prefix_hit"] += len(kvs)
        rest = list(range(len(kvs), len(order)))
        if rest:
            new = s.prefill(view, kvs, rest)
            for j, kv in zip(rest, new, strict=True):
                s.store.put(node(s, order, j), kv, kv.nbytes(), kv.n_tokens)
            kvs += new
            s.meter.actions["prefill"] += len(rest)
        return kvs
