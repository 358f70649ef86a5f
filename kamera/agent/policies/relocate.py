"""``relocate``: a position-free store, R(δ) only (blind, PRCR-style).

Each chunk's KV is stored by its content digest alone, as it was first prefilled (behind whatever the window
held then); later steps move it to its new slot by R(δ) and never correct it. New chunks are prefilled, a run of
consecutive ones in one forward behind the KV assembled so far. Exact while no chunk's antecedents change."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.agent.policies.base import Policy, register
from kamera.agent.session import Session
from kamera.core import ChunkKV
from kamera.window.context import WindowView


@register
@dataclass
class Relocate(Policy):
    """Stored chunks moved by R(δ); missing ones prefilled in runs."""

    name = "relocate"

    def build(self, s: Session, view: WindowView, order: tuple[int, ...]) -> list[ChunkKV]:
        kvs: list[ChunkKV] = []
        key = [("kv", s.digests[c]) for c in order]
        while len(kvs) < len(order):
            j = len(kvs)
            kv = s.store.get(key[j])
            if kv is not None:
                kvs.append(s.moved(view, j, kv))
                s.meter.actions["relocate"] += 1
                continue
            run = [j]
            while run[-1] + 1 < len(order) and key[run[-1] + 1] not in s.store:
                run.append(run[-1] + 1)
            new = s.prefill(view, kvs, run)
            for i, kv in zip(run, new, strict=True):
                s.store.put(key[i], kv, kv.nbytes(), kv.n_tokens)
            kvs += new
            s.meter.actions["prefill"] += len(run)
        return kvs
