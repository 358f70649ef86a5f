"""One policy replaying one trace: its store, its live window, and the primitives it builds a step's KV with,
each counting what it runs.

A step's window (chunk ids in the order the query reads them) becomes a
:class:`~kamera.window.context.WindowView` of the item's shared :class:`~kamera.window.context.WindowContext`
(the re-prefill of that window, the step's reference, is computed there once, whoever asks). A policy builds
the KV of every chunk of the window from three primitives, and the counts in :class:`Meter` come from them:

    prefill(view, kvs, slots)   a run of consecutive chunks prefilled behind the KV assembled so far: one
                                forward of those chunks' tokens (a conditioned forward), its KV read out
    canonical(c)                KV(c|∅) from the policy's store, or prefilled behind the prefix (one solo
                                forward of c's tokens) and stored
    form(view, slot, kv, rank)  the patch Δ = kv − R(δ)·KV(c|∅) of a chunk, one SVD per layer-channel

and the query forward on the assembled cache. The prefix (chat header) and the query are the same for every
policy and are not counted as prefilled tokens. FLOPs are the cost model's (:class:`~kamera.models.flops.
ModelFlops` of the model named by ``cost_model``) for the same forwards.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from kamera.agent.store import Store, canonical_key
from kamera.core import ChunkKV, Patch, deficit, relocate, same_positions
from kamera.models.base import ForwardOut
from kamera.models.flops import ModelFlops
from kamera.window.context import WindowContext, WindowView
from kamera.window.ops import Layout


@dataclass
class Meter:
    """What a policy ran in one step (counted by the primitives that ran it)."""

    tokens: int = 0  # prompt tokens prefilled: conditioned runs and canonicals
    forwards: int = 0  # conditioned forwards (prefill runs; a re-prefill is one)
    solo_forwards: int = 0  # canonical prefills KV(c|∅)
    svds: int = 0  # layer-channel SVDs of patches formed
    flops: float = 0.0  # the same forwards (and the query) in the cost model's FLOPs
    actions: Counter = field(
        default_factory=Counter
    )  # what each chunk of the window took (policy's vocabulary)


class Session:
    """A policy's state over one trace: its :class:`Store`, the previous step's window and KV, the step's meter."""

    def __init__(
        self, wctx: WindowContext, digests: list[str], store: Store, flops: ModelFlops | None = None
    ) -> None:
        self.wctx, self.adapter, self.digests, self.store, self.model_flops = (
            wctx,
            wctx.adapter,
            digests,
            store,
            flops,
        )
        self.live: dict[
            int, tuple[tuple[str, ...], ChunkKV]
        ] = {}  # chunk id → (antecedent digests, its KV) last step
        self.seen: set[int] = set()  # chunk ids any earlier step held
        self.placed: tuple[int, ...] = ()  # the previous step's window as placed
        self.step = 0  # the step being built
        self.plan: list[tuple[int, ...]] = []  # a policy's orders for every step, when it plans ahead
        self.meter = Meter()

    # ----- layout ----------------------------------------------------------------------------------
    def view(self, order: tuple[int, ...]) -> WindowView:
        """The window as the query reads it: prefix · chunks in ``order`` · query (target = the last chunk)."""
        return self.wctx.view(Layout(tuple(order[:-1]), order[-1]))

    @staticmethod
    def slot(view: WindowView, j: int) -> int:
        """The span index of window slot j in ``view``."""
        return view.first_chunk + j

    def head(self, view: WindowView) -> list[ChunkKV]:
        """The prefix's KV (every policy holds it; the re-prefill's, which equals its canonical)."""
        return [view.full_kv(i) for i in range(view.first_chunk)]

    def antecedents(self, order: tuple[int, ...], j: int) -> tuple[str, ...]:
        return tuple(self.digests[c] for c in order[:j])

    def n_tokens(self, chunk: int) -> int:
        return int(self.wctx.chunks[chunk].n_tokens)

    # ----- counted primitives ----------------------------------------------------------------------
    def _flops(self, tokens: float, context: float) -> None:
        if self.model_flops is not None and tokens:
            self.meter.flops += self.model_flops.forward(tokens, context)

    def prefill(self, view: WindowView, kvs: list[ChunkKV], slots: list[int]) -> list[ChunkKV]:
        """Consecutive window slots ``slots`` prefilled in one forward behind the head and ``kvs`` (the KV of the
        slots before them, as this policy built it); their KV, read out of the forward's cache."""
        if not slots or slots != list(range(slots[0], slots[0] + len(slots))) or slots[0] != len(kvs):
            raise ValueError(f"prefill takes the next consecutive slots after {len(kvs)}, got {slots}")
        behind = [*self.head(view), *kvs]
        spans = [(view.enc.spans[self.slot(view, j)], view.start(self.slot(view, j))) for j in slots]
        out = self.adapter.forward(spans, cache=self.adapter.cache(behind), tag="agent_prefill")
        at, got = sum(kv.n_tokens for kv in behind), []
        for j in slots:
            n = view.enc.spans[self.slot(view, j)].n_tokens
            got.append(self.adapter.read(out.cache, at, at + n, view.native_positions(self.slot(view, j))))
            at += n
        new = sum(kv.n_tokens for kv in got)
        self.meter.tokens += new
        self.meter.forwards += 1
        self._flops(new, sum(kv.n_tokens for kv in behind) + new / 2)
        return got

    def reprefill(self, view: WindowView, order: tuple[int, ...]) -> ForwardOut:
        """The whole window and the query in one forward: the view's re-prefill (the item's shared one), counted."""
        n = sum(self.n_tokens(c) for c in order)
        q = view.enc.spans[view.q].n_tokens
        head = sum(kv.n_tokens for kv in self.head(view))
        self.meter.tokens += n
        self.meter.forwards += 1
        self.meter.actions["reprefill"] += len(order)
        self._flops(n + q, head + (n + q) / 2)
        return view.full

    def has_canonical(self, chunk: int) -> bool:
        return canonical_key(self.digests[chunk]) in self.store

    def canonical(self, chunk: int) -> ChunkKV:
        """KV(c|∅) from this policy's store, else prefilled (counted; the tensor is the item's shared one) and
        stored."""
        key = canonical_key(self.digests[chunk])
        kv = self.store.get(key)
        if kv is None:
            kv = self.wctx.canonical(chunk)
            n = kv.n_tokens
            self.meter.tokens += n
            self.meter.solo_forwards += 1
            prefix = (
                self.wctx.prefix.extent
                if self.wctx.prefix is not None and self.wctx.canonical_context == "prefix"
                else 0
            )
            self._flops(n, prefix + n / 2)
            self.store.put(key, kv, kv.nbytes(), n)
        return kv

    def placed_canonical(self, view: WindowView, j: int, chunk: int) -> ChunkKV:
        """R(δ)·KV(c|∅) at window slot j of ``view``."""
        return self.moved(view, j, self.canonical(chunk))

    def moved(self, view: WindowView, j: int, kv: ChunkKV) -> ChunkKV:
        """A KV computed elsewhere (another step, the canonical position) moved to window slot j by R(δ) alone."""
        here = view.native_positions(self.slot(view, j))
        if kv.positions.shape != here.shape:
            raise ValueError(
                f"a KV of {kv.positions.shape[-1]} tokens cannot sit at slot {j} ({here.shape[-1]} tokens)"
            )
        delta = int(here.reshape(-1)[0] - kv.positions.reshape(-1)[0])
        if not same_positions(kv.positions + delta, here):
            raise ValueError(f"the KV's positions are not a shift of slot {j}'s (another chunk?)")
        return relocate(kv, delta) if delta else kv

    def form(self, view: WindowView, j: int, chunk: int, kv: ChunkKV) -> Patch:
        """The full-rank patch of ``kv`` (the chunk's KV at slot j) over R(δ)·KV(c|∅): one SVD per layer-channel."""
        patch = Patch.form(deficit(kv, self.placed_canonical(view, j, chunk)), dtype=self.adapter.dtype)
        self.meter.svds += sum(len(blocks) for chans in patch.factors for blocks in chans)
        return patch

    def query(self, view: WindowView, kvs: list[ChunkKV]) -> ForwardOut:
        """The step's query on prefix ∥ the window's KV as the policy built it."""
        q = view.enc.spans[view.q]
        total = sum(kv.n_tokens for kv in [*self.head(view), *kvs])
        self._flops(q.n_tokens, total + q.n_tokens / 2)
        return view.query(kvs[-1], context=[*self.head(view), *kvs[:-1]], tag="agent_query")


def page_bytes_per_token(wctx: WindowContext) -> int:
    """Bytes one token's KV takes in the model's cache (every layer and channel, the model's dtype)."""
    a = wctx.adapter
    per_layer = sum(s.heads * s.dim for s in a.specs)
    return a.n_layers * per_layer * torch.empty(0, dtype=a.dtype).element_size()
