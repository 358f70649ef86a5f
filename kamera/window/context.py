"""A window item's shared forwards: each chunk encoded once, each chunk's canonical and each layout's
re-prefill computed once, every forward counted and attributed.

    encode        every chunk, the prefix and the query, once per item (vision towers run once)
    canonical     KV(c|∅) per chunk: one forward over [prefix · c] (or c alone), shared by every layout
    view(layout)  a :class:`WindowView`: the layout's re-prefill (one forward; the reference of the
                  operation that produced it) and, read from it, the target's conditioned KV, Δ, patch

A :class:`WindowView` is a :class:`~kamera.reuse.context.ReuseContext` over ``[prefix · before · target ·
after · query]``, so every arm-side tool (``relocated``, ``deficit``, ``patch``, ``query``,
``blind``, the partial forwards of :mod:`kamera.reuse.recompute`) works on it unchanged; it only takes its
forwards from the shared item and splices the chunks after the target back in front of the query.

Costs: every forward-running result is a *resource* keyed by what it is (``("full", layout)``,
``("canonical", chunk)``, …); :meth:`WindowContext.cost` gives the forwards a set of resources took,
by tag, so a probe reports what each variant pays at the operation and what it reads from stored
state, measured rather than assumed, however the probes share the work.

Memory: a view keeps its layout's KV (read out of the re-prefill's cache span by span, the cache itself
released), the target's derived KV (relocated, Δ, the full-rank patch) and logits; blind reuse's query
cache is not kept. :meth:`WindowContext.trim` releases the least recently used views down to a byte
budget between probes (the runner calls it after each probe); a released resource that a later probe
asks for is recomputed (the adapter counts those forwards again, its recorded cost is unchanged), so a
context holds at most the budget plus the working set of the probe running. Canonicals are kept.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Literal

import torch
from transformers import DynamicCache

from kamera.core import ChunkKV, Patch, relocate, same_positions
from kamera.errors import ItemError
from kamera.items.spans import Span
from kamera.items.window import WindowItem
from kamera.metrics import ETA_FLOOR, choice_argmax
from kamera.models.base import Adapter, Encoded, EncodedSpan, ForwardOut, additive_mask, place
from kamera.reuse.context import ReuseContext
from kamera.window.ops import Layout

WindowCanonical = Literal["prefix", "none"]


def as_role(span: EncodedSpan, role: str) -> EncodedSpan:
    """The same encoded chunk (tensors shared) under another span role."""
    s = span.span
    return replace(span, span=Span(role, s.parts, s.name, s.meta))


def gap_span(adapter: Adapter, extent: int) -> EncodedSpan:
    """A span of no tokens that advances positions by ``extent`` (a position-matched hole in a layout)."""
    dev = adapter.device
    hidden = adapter.lm.get_input_embeddings().weight.shape[-1]
    return EncodedSpan(
        Span("A", ("",), "gap"), torch.zeros(0, dtype=torch.long, device=dev),
        torch.zeros(0, hidden, dtype=adapter.dtype, device=dev),
        torch.zeros(adapter.position_rows, 0, dtype=torch.long, device=dev), extent,
        torch.zeros(0, dtype=torch.bool, device=dev),
    )


def first_token_ids(adapter: Adapter, choices: Sequence[str]) -> list[int]:
    """The first token id of each choice (its first answer token: a letter, or an answer word); distinct."""
    ids = adapter.letter_ids(list(choices))  # one id per element: a whole choice string, not its characters
    if len(set(ids)) != len(ids):
        raise ValueError(f"choices {list(choices)} share a first token; they cannot be told apart from one logit")
    return ids


class WindowContext:
    """One window item on one model: encoded chunks, shared forwards, and what each forward cost.

    ``canonical_context``: where a chunk's canonical KV(c|∅) is prefilled: ``"prefix"`` (default, behind
    the prefix, as :class:`~kamera.reuse.context.ReuseContext` does) or ``"none"`` (the chunk alone from 0).
    ``eta_floor``: the KL_blind below which η is not measured (NaN).
    """

    def __init__(self, adapter: Adapter, item: WindowItem, canonical_context: WindowCanonical = "prefix",
                 eta_floor: float = ETA_FLOOR) -> None:
        if canonical_context not in ("prefix", "none"):
            raise ValueError(f"a window's canonical_context must be 'prefix' or 'none', got {canonical_context!r}")
        self.adapter, self.item = adapter, item
        self.canonical_context: WindowCanonical = canonical_context
        self.eta_floor = eta_floor
        first = item.history[0]
        with torch.no_grad():  # each chunk's tokens and vision features, once
            enc = adapter.encode(
                [*([item.prefix] if item.prefix else []), Span("B", first.parts, first.name), item.query]
            )
            rest = [adapter.encode_span(Span("A", c.parts, c.name)) for c in item.chunks[1:]]
        self.prefix = enc.spans[0] if enc.spans[0].role == "prefix" else None  # the chat header may add one
        self.query_span = enc.spans[-1]
        self.chunks: list[EncodedSpan] = [enc.spans[-2], *rest]
        self.choice_ids = None if item.choices is None else first_token_ids(adapter, item.choices)
        self._views: dict[Layout, WindowView] = {}
        self._values: dict[Hashable, object] = {}
        self._costs: dict[Hashable, Counter] = {}
        self._open: list[Counter] = []

    # ----- shared, costed results ------------------------------------------------------------------
    def resource(self, key: Hashable, make: Callable[[], object]):
        """``make()`` once per key; the forwards it runs (minus those of resources it creates) are its cost."""
        if key in self._values:
            return self._values[key]
        before = Counter(self.adapter.forwards)
        self._open.append(Counter())
        try:
            value = make()
        finally:
            nested = self._open.pop()
        spent = Counter(self.adapter.forwards)
        spent.subtract(before)
        spent = +spent
        self._costs[key] = +(spent - nested)
        if self._open:
            self._open[-1].update(spent)
        self._values[key] = value
        return value

    def cost(self, keys: Iterable[Hashable]) -> Counter:
        """Forwards by tag that the resources ``keys`` took when they were made (each key once)."""
        total: Counter = Counter()
        for key in dict.fromkeys(keys):
            if key not in self._costs:
                raise KeyError(f"no resource {key!r} has been made on this window item")
            total.update(self._costs[key])
        return total

    def canonical(self, chunk: int) -> ChunkKV:
        """KV(c|∅) of chunk id ``chunk``: behind the prefix (at the prefix's extent) or alone from 0."""
        self._check_chunk(chunk)

        def make() -> ChunkKV:
            c = self.chunks[chunk]
            head = [] if self.canonical_context == "none" or self.prefix is None else [self.prefix]
            out = self.adapter.forward(place([*head, c]), tag="solo")
            n, start = out.cache.get_seq_length(), sum(s.extent for s in head)
            return self.adapter.read(out.cache, n - c.n_tokens, n, c.local_pos + start)

        return self.resource(("canonical", chunk), make)

    def view(self, layout: Layout) -> WindowView:
        """The (cached) view of one layout (most recently used last)."""
        if layout not in self._views:
            for c in layout.window:
                self._check_chunk(c)
            self._views[layout] = WindowView(self, layout)
        self._views[layout] = self._views.pop(layout)
        return self._views[layout]

    # ----- memory ----------------------------------------------------------------------------------
    def held_bytes(self) -> int:
        """Bytes of the tensors this context holds: every view's KV and derived tensors, the canonicals and
        other resources (each storage counted once; the encoded chunks' embeddings not counted)."""
        return tensor_bytes([*(_state(v) for v in self._views.values()), *self._values.values()])

    def release(self, layout: Layout) -> None:
        """Forget a layout's view and every resource made for it (its costs stay recorded)."""
        self._views.pop(layout, None)
        for key in [k for k in self._values if isinstance(k, tuple) and layout in k[1:]]:
            del self._values[key]

    def trim(self, budget: int) -> int:
        """Release the least recently used views until at most ``budget`` bytes are held; the bytes freed."""
        held = start = self.held_bytes()
        for layout in list(self._views):
            if held <= budget:
                break
            self.release(layout)
            held = self.held_bytes()
        return start - held

    def _check_chunk(self, chunk: int) -> None:
        if not 0 <= chunk < len(self.chunks):
            raise ValueError(
                f"window item {self.item.item_id} has {len(self.chunks)} chunks "
                f"({self.item.n_history} history + {len(self.item.foreign)} foreign); no chunk id {chunk}"
            )

    # ----- decisions -------------------------------------------------------------------------------
    def decision(self, logits: torch.Tensor) -> int:
        """The answer token an arm takes: argmax over the choices' first tokens (or the vocabulary)."""
        return choice_argmax(logits, self.choice_ids)

    def answer_text(self, logits: torch.Tensor) -> str:
        """The decision as a choice string (or the decoded token for open answers)."""
        tok = self.decision(logits)
        if self.choice_ids is None:
            return self.adapter.decode([tok])
        return self.item.choices[self.choice_ids.index(tok)]


class WindowView(ReuseContext):
    """One layout of a window item as a reuse context: B is the layout's target chunk.

    ``full`` (the re-prefill of the layout) and ``canonical`` come from the shared :class:`WindowContext`;
    ``splice`` puts the chunks after the target (their KV from the re-prefill) between B and the query, so
    every variant differs from the reference in the target's KV alone.
    """

    def __init__(self, wctx: WindowContext, layout: Layout) -> None:
        head = [wctx.prefix] if wctx.prefix is not None else []
        if layout.gap:
            head.append(gap_span(wctx.adapter, layout.gap))
        self.first_chunk = len(head)  # index in enc.spans of before[0]
        spans = [
            *head,
            *(as_role(wctx.chunks[c], "A") for c in layout.before),
            as_role(wctx.chunks[layout.target], "B"),
            *(as_role(wctx.chunks[c], "A") for c in layout.after),
            wctx.query_span,
        ]
        enc = Encoded(spans)
        total = enc.starts[-1] + spans[-1].extent
        if total > wctx.adapter.max_positions:  # the item is too long for the model: it fails, the job goes on
            raise ItemError(
                f"window layout {layout.window} needs {total} positions; "
                f"{wctx.adapter.name} has {wctx.adapter.max_positions}"
            )
        self.wctx, self.layout = wctx, layout
        super().__init__(wctx.adapter, enc, canonical_context=wctx.canonical_context)

    # ----- keys of the costed resources this view reads --------------------------------------------
    @property
    def full_key(self) -> tuple:
        return ("full", self.layout)

    @property
    def canonical_key(self) -> tuple:
        return ("canonical", self.layout.target)

    # ----- shared forwards -------------------------------------------------------------------------
    @cached_property
    def _reprefill(self) -> tuple[ForwardOut, list[ChunkKV]]:
        """The layout's re-prefill (under the 4D mask if the layout masks chunks): its logits and the KV of
        every span before the query, read out of its cache, which is then released."""

        def make() -> tuple[ForwardOut, list[ChunkKV]]:
            mask = additive_mask(self.masked_allow(), self.adapter.dtype) if self.layout.masked else None
            out = self.adapter.forward(place(self.enc.spans, self.offset), mask=mask, tag="full")
            kvs = [self.adapter.read(out.cache, *self.ranges[i], self.native_positions(i)) for i in range(self.q)]
            return replace(out, cache=None), kvs

        return self.wctx.resource(self.full_key, make)

    @property
    def full(self) -> ForwardOut:
        """The re-prefill's logits and positions (its cache is read into :meth:`full_kv`)."""
        return self._reprefill[0]

    def full_kv(self, i: int) -> ChunkKV:
        """Span i's KV as the re-prefill left it (every span before the query)."""
        if not 0 <= i < self.q:
            raise IndexError(f"span {i}: the re-prefill's KV is kept for spans 0 … {self.q - 1}")
        return self._reprefill[1][i]

    @cached_property
    def blind(self) -> ForwardOut:
        """Blind reuse's query forward; only its logits are kept (probes read no more of it)."""
        return replace(self.query(self.relocated, tag="blind"), cache=None)

    @cached_property
    def canonical(self) -> ChunkKV:
        return self.wctx.canonical(self.layout.target)

    def masked_allow(self) -> torch.Tensor:
        """[L, L] bool: causal, except that no token after a masked chunk attends it."""
        n = self.ranges[-1][1]
        allow = torch.ones(n, n, dtype=torch.bool, device=self.adapter.device).tril()
        for m in self.layout.masked:
            a, z = self.ranges[self.first_chunk + m]
            allow[z:, a:z] = False
        return allow

    @cached_property
    def after_kv(self) -> list[ChunkKV]:
        """The chunks after the target, as the re-prefill left them."""
        return [self.full_kv(i) for i in range(self.b + 1, self.q)]

    def splice(self, b_kv: ChunkKV, context: list[ChunkKV] | None = None) -> DynamicCache:
        """prefix / before ∥ the target's KV ∥ the chunks after it: the cache the query reads."""
        if not same_positions(b_kv.positions, self.native_positions(self.b)):
            raise ValueError("the target's KV is not at its positions in this layout; carry it here first")
        return self.adapter.cache([*(self.context_kv if context is None else context), b_kv, *self.after_kv])

    # ----- moving the target's KV or patch between layouts -----------------------------------------
    def shift_to_here(self, positions: torch.Tensor) -> int:
        """δ that moves the target from ``positions`` (another layout's) onto its positions here."""
        return shift(positions, self.native_positions(self.b), "this layout's target")

    def carry(self, kv: ChunkKV) -> ChunkKV:
        """The target's KV from another layout, moved here by R(δ) alone (the keep-as-is / stale KV)."""
        return relocate(kv, self.shift_to_here(kv.positions))

    def carry_patch(self, patch: Patch) -> Patch:
        """A patch formed in another layout, relocated to the target's positions here (a stored patch replayed)."""
        return patch.relocate(self.shift_to_here(patch.positions))

    def store_patch(self, patch: Patch) -> Patch:
        """A patch formed here, relocated by R(δ) onto the target's canonical positions: the position-free form
        stored beside KV(target|∅), which :meth:`carry_patch` relocates again wherever the target is replayed."""
        return patch.relocate(shift(patch.positions, self.canonical.positions, "the target's canonical"))

    def query_patch(self, patch: Patch, tag: str) -> ForwardOut:
        """The query on R(δ)·KV(target|∅) + patch."""
        return self.query(patch.apply(self.relocated), tag=tag)


def shift(positions: torch.Tensor, onto: torch.Tensor, where: str) -> int:
    """δ with ``positions`` + δ = ``onto`` (a chunk's positions in two frames); a one-line error if none exists."""
    if positions.shape != onto.shape:
        raise ValueError(f"the KV holds {positions.shape[-1]} tokens; {where} has {onto.shape[-1]}")
    delta = int(onto.reshape(-1)[0] - positions.reshape(-1)[0])
    if not same_positions(positions + delta, onto):
        raise ValueError(f"the KV's positions are not a shift of the positions of {where} (another chunk?)")
    return delta


def _state(view: WindowView) -> list:
    """What a view holds beyond the shared item (its cached KV, patches and logits)."""
    return [v for k, v in vars(view).items() if k not in ("adapter", "wctx", "enc", "layout")]


def tensor_bytes(obj: object) -> int:
    """Bytes of the distinct tensor storages reachable from ``obj`` through lists, tuples, dicts, dataclasses
    and caches (``layers`` with ``keys`` / ``values``)."""
    seen, total, stack, visited = set(), 0, [obj], set()
    while stack:
        o = stack.pop()
        if id(o) in visited or o is None or isinstance(o, (str, int, float, bool)):
            continue
        visited.add(id(o))
        if isinstance(o, torch.Tensor):
            storage = o.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif dataclasses.is_dataclass(o):
            stack.extend(getattr(o, f.name) for f in dataclasses.fields(o))
        elif hasattr(o, "layers"):  # a transformers cache
            stack.extend(
                t for layer in o.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
            )
    return total


def overwrite(adapter: Adapter, cache: DynamicCache, start: int, kv: ChunkKV) -> None:
    """Copy ``kv`` into tokens [start, start + n) of ``cache`` in place, in the model's cache layout (no arithmetic)."""
    src = adapter.cache([kv])
    if len(src.layers) > len(cache.layers) or start + kv.n_tokens > cache.get_seq_length():
        raise ValueError(f"tokens [{start}, {start + kv.n_tokens}) do not fit a cache of {cache.get_seq_length()}")
    for dst, new in zip(cache.layers, src.layers, strict=False):
        dst.keys[..., start : start + kv.n_tokens, :] = new.keys
        dst.values[..., start : start + kv.n_tokens, :] = new.values


def fork(adapter: Adapter, cache: DynamicCache) -> DynamicCache:
    """A new cache over the same tensors: a forward appends to the fork, never to ``cache`` itself."""
    return DynamicCache(
        ddp_cache_data=[(layer.keys, layer.values) for layer in cache.layers], config=adapter.text_config
    )
