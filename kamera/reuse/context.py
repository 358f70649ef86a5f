"""The shared forwards of one item, paid once and read by every reuse arm.

    full prefill [prefix · A · B · query]  → re-prefill logits (the ceiling), KV(B|A), prefix/A KV
    solo prefill [prefix · B]              → canonical KV(B|∅), relocated by R(δ) to B's native start
    query forward on a spliced cache       → an arm's logits (prefix KV ∥ A KV ∥ the arm's B KV)
    oracle forward (on demand)             → one forward over [prefix A B query] with B ↛ A masked

Everything is computed lazily and cached on the context; ``adapter.forwards`` counts forwards by
tag so tests can prove no arm repeats a shared one.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

import torch
from transformers import DynamicCache

from kamera.core import ChunkKV, Deficit, Patch, deficit, relocate, same_positions
from kamera.items.spans import Span
from kamera.metrics import kl
from kamera.models.base import Adapter, Encoded, ForwardOut, additive_mask, place

CanonicalContext = Literal["prefix", "native", "none"]


class ReuseContext:
    """One item: its encoded spans and the forwards every arm shares.

    Where the canonical KV(B|∅) is prefilled (``canonical_context``):
    - ``"prefix"`` (default): behind the prefix, right after it; blind reuse relocates it by
      δ = A's extent, so blind differs from the 4D-mask oracle only by what relocation adds
      (the prefix ↔ B distance changes): that difference is ctrl-KL.
    - ``"native"``: behind the prefix at B's native positions (δ = 0); blind then equals the oracle.
    - ``"none"``: B truly alone from position 0 (relocation is then exact up to float rounding).

    ``offset`` places the whole item (prefix included) at that absolute position.
    """

    def __init__(
        self,
        adapter: Adapter,
        spans: list[Span] | Encoded,
        canonical_context: CanonicalContext = "prefix",
        offset: int = 0,
    ) -> None:
        if canonical_context not in ("prefix", "native", "none"):
            raise ValueError(f"canonical_context must be 'prefix', 'native' or 'none', got {canonical_context!r}")
        self.adapter = adapter
        self.enc = spans if isinstance(spans, Encoded) else adapter.encode(spans)
        self.canonical_context = canonical_context
        self.offset = int(offset)
        end = self.offset + self.enc.starts[-1] + self.enc.spans[-1].extent
        if self.offset and (self.offset < 0 or end > adapter.max_positions):  # at 0, encode checked the length
            raise ValueError(f"offset {self.offset}: the item would end at position {end}, outside {adapter.name}'s "
                             f"context of {adapter.max_positions}")
        self.ranges = self.enc.token_ranges()
        self.b = self.enc.b
        self.q = self.enc.query
        self.has_prefix = self.enc.spans[0].role == "prefix"
        self._patches: dict[str, Patch] = {}

    # ----- layout ------------------------------------------------------------------------------
    @property
    def n_b(self) -> int:
        return self.enc.spans[self.b].n_tokens

    @property
    def b_start(self) -> int:
        """B's native (conditioned) start position."""
        return self.enc.starts[self.b] + self.offset

    @property
    def canonical_start(self) -> int:
        """Where the canonical KV(B|∅) was prefilled."""
        if self.canonical_context == "none" or not self.has_prefix:
            return 0
        return self.b_start if self.canonical_context == "native" else self.offset + self.enc.spans[0].extent

    @property
    def delta(self) -> int:
        """δ that moves the canonical onto B's native positions."""
        return self.b_start - self.canonical_start

    def start(self, i: int) -> int:
        """Span i's native start position."""
        return self.enc.starts[i] + self.offset

    def native_positions(self, i: int) -> torch.Tensor:
        return self.enc.spans[i].local_pos + self.start(i)

    # ----- shared forwards ---------------------------------------------------------------------
    @cached_property
    def full(self) -> ForwardOut:
        """Re-prefill: one forward over the whole item; its logits are the ceiling."""
        return self.adapter.forward(place(self.enc.spans, self.offset), tag="full")

    @property
    def reprefill_logits(self) -> torch.Tensor:
        return self.full.logits

    def full_kv(self, i: int) -> ChunkKV:
        """Span i's KV as the full prefill left it (conditioned on everything before it)."""
        a, z = self.ranges[i]
        return self.adapter.read(self.full.cache, a, z, self.native_positions(i))

    @cached_property
    def context_kv(self) -> list[ChunkKV]:
        """Prefix and A spans' KV from the full prefill, in order (what precedes B in every arm)."""
        return [self.full_kv(i) for i in range(self.b)]

    @cached_property
    def conditioned(self) -> ChunkKV:
        """KV(B|A) at B's native positions."""
        return self.full_kv(self.b)

    @cached_property
    def canonical(self) -> ChunkKV:
        """KV(B|∅): B prefilled behind the prefix only (or alone), at ``canonical_start``."""
        b = self.enc.spans[self.b]
        if self.canonical_context == "none" or not self.has_prefix:
            out = self.adapter.forward([(b, 0)], tag="solo")
        else:
            prefix = self.adapter.cache([self.context_kv[0]])
            out = self.adapter.forward([(b, self.canonical_start)], cache=prefix, tag="solo")
        start = out.cache.get_seq_length() - b.n_tokens
        return self.adapter.read(out.cache, start, start + b.n_tokens, b.local_pos + self.canonical_start)

    @cached_property
    def relocated(self) -> ChunkKV:
        """R(δ)·KV(B|∅): the canonical moved to B's native positions (blind reuse's B)."""
        return relocate(self.canonical, self.delta)

    @cached_property
    def deficit(self) -> Deficit:
        """Δ = KV(B|A) − R(δ)·KV(B|∅), in B's native frame."""
        return deficit(self.conditioned, self.relocated)

    @cached_property
    def patch(self) -> Patch:
        """The full-rank patch (one SVD per layer-channel); ``.truncate(m)`` views any rank."""
        return self.patch_for("layer")

    def patch_for(self, granularity: str) -> Patch:
        """The full-rank patch at a granularity ("layer" or "head"), decomposed once per item."""
        if granularity not in self._patches:
            self._patches[granularity] = Patch.form(self.deficit, granularity, dtype=self.adapter.dtype)
        return self._patches[granularity]

    # ----- splice and query --------------------------------------------------------------------
    def splice(self, b_kv: ChunkKV, context: list[ChunkKV] | None = None) -> DynamicCache:
        """A fresh cache: prefix/A KV ∥ the arm's B KV (B must sit at its native positions)."""
        if not same_positions(b_kv.positions, self.native_positions(self.b)):
            raise ValueError("B's KV is not at its native positions; relocate it by δ before splicing")
        return self.adapter.cache([*(self.context_kv if context is None else context), b_kv])

    def query(self, b_kv: ChunkKV, context: list[ChunkKV] | None = None, tag: str = "query") -> ForwardOut:
        """Run the query on prefix/A ∥ ``b_kv``; returns the next-token logits of the first answer token."""
        cache = self.splice(b_kv, context)
        q = self.enc.spans[self.q]
        return self.adapter.forward([(q, self.start(self.q))], cache=cache, tag=tag)

    @cached_property
    def blind(self) -> ForwardOut:
        """Blind reuse: the relocated canonical, no patch (the floor)."""
        return self.query(self.relocated, tag="blind")

    # ----- the 4D-mask oracle ------------------------------------------------------------------
    def oracle_mask(self) -> torch.Tensor:
        """[L, L] bool: causal, except B's rows may not attend A's columns (B ↛ A)."""
        n = self.ranges[-1][1]
        allow = torch.ones(n, n, dtype=torch.bool, device=self.adapter.device).tril()
        a0 = self.ranges[1][0] if self.has_prefix else 0
        b0, b1 = self.ranges[self.b]
        allow[b0:b1, a0:b0] = False
        return allow

    @cached_property
    def oracle(self) -> ForwardOut:
        """One forward over [prefix A B query] with B ↛ A: conditioning removed at B's native positions."""
        mask = additive_mask(self.oracle_mask(), self.adapter.dtype)
        return self.adapter.forward(place(self.enc.spans, self.offset), mask=mask, tag="oracle")

    @cached_property
    def oracle_b(self) -> ChunkKV:
        """B's KV from the oracle forward."""
        a, z = self.ranges[self.b]
        return self.adapter.read(self.oracle.cache, a, z, self.native_positions(self.b))

    def loss_kl(self) -> float:
        """KL(re-prefill ‖ 4D-mask oracle): the conditioning loss at B's native positions (Table 7)."""
        return kl(self.reprefill_logits, self.oracle.logits)

    def ctrl_kl(self) -> float:
        """KL(oracle ‖ blind reuse relocated from the canonical position): what relocation adds (Table 7)."""
        return kl(self.oracle.logits, self.blind.logits)

    # ----- helpers -----------------------------------------------------------------------------
    def page_bytes(self) -> int:
        """Bytes of B's full KV page in the model's own layout (the denominator of bytes fractions)."""
        return self.conditioned.nbytes()
