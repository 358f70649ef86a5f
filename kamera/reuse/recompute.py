"""The partial-forward engine: recompute chosen rows of B at chosen layers, in context.

Every token- and layer-recompute arm (CacheBlend, EPIC, MPIC, VLCache, first-k, oracle top-p,
shallow re-prefill, …) is the same operation on the spliced cache ``[prefix · A · B]``: at layer ℓ,
a set of B's rows is run through the decoder layer with their current hidden states, their new K/V
(MLA: c_KV and k_pe) overwrite their slots, and their queries attend the whole cache up to their
own position (the prefix and A exactly as the full prefill left them, B as it stands at that
layer: recomputed rows fresh, the others reused). Later layers therefore see the recomputed rows,
and recomputed rows see the context, the "strongest form" the paper compares against (App. C.3).

How it is driven (no transformers internals are patched):
- :class:`SlotCache` holds the whole sequence; its layers' ``update()`` writes the new rows into
  their slots instead of appending, and returns the full K/V for attention.
- :class:`LayerDriver` calls the model's own decoder layers one at a time over only the rows being
  recomputed, with their native ``position_ids`` (the model's own rotary embedding, so M-RoPE and
  DeepSeek-V2's interleaved k_pe need nothing special) and an additive mask
  ``allow[i, j] = j <= row_i``. MLA layers cache the latent, so the slots they overwrite are
  c_KV | k_pe rows. Qwen3-VL's deepstack features are added after layer k to the recomputed rows
  that are visual, exactly where the model's own forward adds them.
- A row that is recomputed at layer ℓ but was not at ℓ − 1 needs a hidden state entering ℓ. At
  ℓ = 0 that is its input embedding. Deeper, a layer's K/V depend only on the hidden state entering
  it, so the row resumes one layer below: from its hidden state entering ℓ − 1 in B's canonical
  forward (:func:`solo_pass`, one extra pass per item) it runs layer ℓ − 1 in context (a lead-in whose
  K/V equal the reused ones and are kept as they were), and its layer-ℓ K/V carry the context.

Costs are counted in (row, layer) cells: one cell is one token-row of B's page at one layer, so
``page_bytes / (n_B · n_layers)`` bytes; :class:`Recomputed` separates the cells whose K/V were kept
from all cells run (lead-ins, probes). Every pass is counted in ``adapter.forwards`` under its
own tag; shared per-item results (the canonical hidden states, attention probes) are cached per
context in :func:`shared`, so however many arms run on a context, each is computed once.

Requirements: a 4D additive mask must reach the kernel, so the engine's layers run ``sdpa`` (or ``eager``
when that is loaded) even on a model loaded with flash-attention 2. A sliding-window layer
(``adapter.layer_window(ℓ)``, Gemma 3) gets the window in its row mask, ``row − window < j <= row``, and
each layer rotates with its own RoPE base (``adapter.layer_rotary_embeddings``); families whose adapter
refuses ``"layers"`` (Gemma-3n's AltUp and per-layer inputs, recurrent layers) are not driven.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicLayer

from kamera.core import ChunkKV, same_positions
from kamera.models.base import MASK_KERNELS, Adapter, EncodedSpan, additive_mask
from kamera.reuse.context import ReuseContext

Rows = torch.Tensor | Sequence[int]

_SHARED: weakref.WeakKeyDictionary[ReuseContext, dict] = weakref.WeakKeyDictionary()


def shared(ctx: ReuseContext, key: str, make: Callable[[], object]):
    """A per-context result computed once (``make()``) and cached for every arm that asks again."""
    store = _SHARED.setdefault(ctx, {})
    if key not in store:
        store[key] = make()
    return store[key]


# ----- the cache whose update writes rows into their slots -----------------------------------------
class SlotLayer(DynamicLayer):
    """One layer of a full sequence, [1, heads, S, dim] per tensor; ``update`` overwrites rows ``slots``."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values = keys, values
        self.device = keys.device
        self.is_initialized = True
        self.slots: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.slots is None or self.slots.numel() != key_states.shape[-2]:
            raise RuntimeError("SlotLayer.update called without slots matching the recomputed rows")
        self.keys[:, :, self.slots] = key_states
        self.values[:, :, self.slots] = value_states
        return self.keys, self.values


class SlotCache(Cache):
    """A cache over a fixed sequence whose layers overwrite rows in place (see :class:`SlotLayer`)."""

    def __init__(self, layers: list[SlotLayer]) -> None:
        super().__init__(layers=layers)


# ----- the layer driver -----------------------------------------------------------------------------
def _check_engine_support(adapter: Adapter) -> None:
    why = adapter.refuses("layers")
    if why:
        raise NotImplementedError(why)


def eager_attention(adapter: Adapter):
    """Run the language model with eager attention (so attention weights exist) and restore it after."""
    return adapter.attention_kernel("eager")


class LayerDriver:
    """The decoder stack over a laid-out sequence, driven one layer at a time over chosen rows.

    ``spans`` and ``chunks`` are aligned one to one: chunk i is span i's KV (``[n_i, heads, dim]``
    per layer-channel, at its positions), laid end to end into one :class:`SlotCache` (a copy; the
    chunks are never written). Rows are global indices into that sequence. The layers run between
    two :meth:`finish` calls count as one forward under ``tag`` in ``adapter.forwards``.
    """

    def __init__(
        self, adapter: Adapter, spans: Sequence[EncodedSpan], chunks: Sequence[ChunkKV], tag: str
    ) -> None:
        if len(spans) != len(chunks):
            raise ValueError(f"{len(spans)} spans but {len(chunks)} chunks")
        for s, c in zip(spans, chunks, strict=True):
            if s.n_tokens != c.n_tokens:
                raise ValueError(f"span {s.role!r} has {s.n_tokens} tokens but its KV has {c.n_tokens}")
        _check_engine_support(adapter)
        self.adapter = adapter
        self.tag = tag
        self.positions = torch.cat([c.positions for c in chunks], dim=-1)
        self.n_tokens = int(self.positions.shape[-1])
        self.deepstack = self._deepstack(spans)
        filled = adapter.cache(list(chunks))
        self.cache = SlotCache([SlotLayer(lay.keys, lay.values) for lay in filled.layers])
        self.cells = 0
        self._pending = False

    def _deepstack(self, spans: Sequence[EncodedSpan]) -> tuple[list[torch.Tensor], torch.Tensor] | None:
        """Qwen3-VL deepstack inputs of the sequence: per deepstack layer the features of its visual rows
        [n_visual, hidden], and per row [S] its index into them (−1 where none is added)."""
        carriers = [s for s in spans if s.deepstack is not None]
        if not carriers:
            return None
        depth = len(carriers[0].deepstack)
        feats = [torch.cat([s.deepstack[k] for s in carriers]) for k in range(depth)]
        index, seen = [], 0
        for s in spans:
            idx = torch.full((s.n_tokens,), -1, dtype=torch.long, device=s.embeds.device)
            if s.deepstack is not None:
                n_vis = int(s.visual.sum())
                idx[s.visual] = torch.arange(seen, seen + n_vis, device=idx.device)
                seen += n_vis
            index.append(idx)
        return feats, torch.cat(index)

    @property
    def n_layers(self) -> int:
        return self.adapter.n_layers

    def mask(self, rows: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        """[1, 1, q, S] additive mask: row i attends every column j ≤ its own slot; at a sliding-window ``layer``
        only the last ``window`` of them, j > slot − window (the model's own window, counted in slots)."""
        cols = torch.arange(self.n_tokens, device=rows.device)
        allow = cols[None, :] <= rows[:, None]
        window = None if layer is None else self.adapter.layer_window(layer)
        if window is not None:
            allow &= cols[None, :] > rows[:, None] - window
        return additive_mask(allow, self.adapter.dtype)

    @torch.no_grad()
    def run(self, layer: int, rows: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Run decoder layer ``layer`` over ``rows`` (global, [q]) from ``hidden`` [q, H]; returns [q, H].

        Their new K/V overwrite their slots before attention, so rows see each other's fresh K/V.
        """
        a = self.adapter
        self.cache.layers[layer].slots = rows
        pos = a.position_ids(self.positions[:, rows])
        h = hidden[None]
        pe = a.layer_rotary_embeddings(layer, h, pos)
        impl = a.attn_implementation if a.attn_implementation in MASK_KERNELS else "sdpa"  # its row mask is 4D
        with a.attention_kernel(impl):
            out = a.lm.layers[layer](
                h,
                attention_mask=self.mask(rows, layer),
                position_embeddings=pe,
                position_ids=pos if a.position_rows == 1 else None,
                cache=self.cache,
                use_cache=True,
            )
        a.kernels[impl] += 1
        if isinstance(out, tuple):
            out = out[0]
        out = out[0]
        if self.deepstack is not None and layer < len(self.deepstack[0]):
            idx = self.deepstack[1][rows]
            vis = idx >= 0
            if bool(vis.any()):
                out = out.clone()
                out[vis] = out[vis] + self.deepstack[0][layer][idx[vis]].to(out.dtype)
        self.cache.layers[layer].slots = None
        self.cells += int(rows.numel())
        self._pending = True
        return out

    def finish(self) -> None:
        """Count the layers run since the last call as one forward under ``tag`` (nothing if none ran)."""
        if self._pending:
            self.adapter.forwards[self.tag] += 1
            self._pending = False

    def layer_rows(self, layer: int, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The cached channels of ``rows`` at ``layer``, each [q, heads, dim] (views of the cache)."""
        lay = self.cache.layers[layer]
        return (lay.keys[0, :, rows].transpose(0, 1), lay.values[0, :, rows].transpose(0, 1))

    def write(self, layer: int, rows: torch.Tensor, chans: tuple[torch.Tensor, ...]) -> None:
        """Overwrite ``rows`` at ``layer`` with ``chans`` (each [q, heads, dim])."""
        lay = self.cache.layers[layer]
        lay.keys[0, :, rows] = chans[0].transpose(0, 1)
        lay.values[0, :, rows] = chans[1].transpose(0, 1)

    def read(self, start: int, stop: int) -> ChunkKV:
        """Rows [start, stop) of the sequence as a ChunkKV (copied)."""
        return self.adapter.read(self.cache, start, stop, self.positions[:, start:stop])


# ----- the partial forward over B ------------------------------------------------------------------
@dataclass
class Recomputed:
    """A partial forward's result: B's KV (native positions), and what it cost.

    ``written[ℓ]`` are the B rows whose KV at layer ℓ was recomputed and kept (the others hold the
    base). ``cells`` counts every (row, layer) the decoder ran, including lead-in layers and probes
    whose KV was not kept; ``n_written_cells`` only the kept ones.
    """

    kv: ChunkKV
    written: list[torch.Tensor]
    cells: int

    @property
    def n_written_cells(self) -> int:
        return sum(int(r.numel()) for r in self.written)


class PartialForward:
    """B's rows recomputed in context on the spliced cache ``[prefix · A · base]``.

    ``base`` is B's starting KV at its native positions (default: the relocated canonical, i.e. blind
    reuse). Rows are B-local indices. :meth:`step` runs one layer over rows and writes their KV;
    :meth:`entry_hidden` gives the hidden state of rows that start being recomputed at a layer;
    :meth:`restore` puts base rows back; :meth:`result` returns B's KV and the cost.
    """

    def __init__(self, ctx: ReuseContext, base: ChunkKV | None = None, tag: str = "recompute") -> None:
        self.ctx = ctx
        self.base = ctx.relocated if base is None else base
        if not same_positions(self.base.positions, ctx.native_positions(ctx.b)):
            raise ValueError("the base KV of B must sit at B's native positions")
        spans = ctx.enc.spans[: ctx.b + 1]
        self.driver = LayerDriver(ctx.adapter, spans, [*ctx.context_kv, self.base], tag)
        self.offset = ctx.ranges[ctx.b][0]
        self.n_b = ctx.n_b
        self.written: list[set[int]] = [set() for _ in range(ctx.adapter.n_layers)]

    @property
    def n_layers(self) -> int:
        return self.driver.n_layers

    def rows(self, rows: Rows) -> torch.Tensor:
        """Validated, sorted, unique B-local rows as a long tensor."""
        t = torch.as_tensor(rows, dtype=torch.long, device=self.ctx.adapter.device).flatten()
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.n_b):
            raise ValueError(f"B rows must lie in [0, {self.n_b}), got {int(t.min())}..{int(t.max())}")
        return torch.unique(t)

    def entry_hidden(self, layer: int, rows: torch.Tensor) -> torch.Tensor:
        """Hidden states [q, H] entering ``layer`` for B ``rows`` that were not recomputed at ``layer − 1``.

        Layer 0: their input embeddings. Deeper: a lead-in run of layer ``layer − 1`` in context from
        their canonical hidden state entering it (:func:`solo_hidden`); the K/V that lead-in computes
        equal the reused ones (a layer's K/V depend only on the hidden state entering it), so they are
        put back, and the rows' layer-``layer`` K/V are the first to carry the context."""
        if layer == 0:
            return self.ctx.enc.spans[self.ctx.b].embeds[rows]
        below = layer - 1
        start = self.ctx.enc.spans[self.ctx.b].embeds if below == 0 else solo_hidden(self.ctx)[below]
        hidden = self.driver.run(below, rows + self.offset, start[rows])
        self._put_back(below, rows)
        return hidden

    def step(self, layer: int, rows: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Recompute B ``rows`` at ``layer`` from ``hidden`` [q, H]; returns their output hidden [q, H]."""
        self.written[layer].update(rows.tolist())
        return self.driver.run(layer, rows + self.offset, hidden)

    def current(self, layer: int, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """B ``rows``' KV at ``layer`` as the cache holds it now, each [q, heads, dim]."""
        return self.driver.layer_rows(layer, rows + self.offset)

    def _put_back(self, layer: int, rows: torch.Tensor) -> None:
        self.driver.write(layer, rows + self.offset, tuple(t[rows] for t in self.base.layers[layer]))

    def restore(self, layers: Iterable[int], rows: torch.Tensor) -> None:
        """Put the base KV of B ``rows`` back at ``layers``; they count as not recomputed there."""
        if rows.numel() == 0:
            return
        for l in layers:
            self._put_back(l, rows)
            self.written[l].difference_update(rows.tolist())

    def result(self) -> Recomputed:
        self.driver.finish()
        a, z = self.ctx.ranges[self.ctx.b]
        dev = self.ctx.adapter.device
        written = [torch.tensor(sorted(w), dtype=torch.long, device=dev) for w in self.written]
        return Recomputed(self.driver.read(a, z), written, self.driver.cells)


def recompute_schedule(ctx: ReuseContext, schedule: Sequence[Rows], base: ChunkKV | None = None,
                       tag: str = "recompute") -> Recomputed:
    """Recompute ``schedule[ℓ]`` (B-local rows) at each layer ℓ in context; rows not listed keep ``base``.

    A row recomputed at ℓ − 1 carries its hidden state into ℓ; a row that starts at ℓ enters through
    :meth:`PartialForward.entry_hidden` (its embedding at ℓ = 0, a lead-in of layer ℓ − 1 from its
    canonical hidden state deeper). An all-empty schedule runs nothing and returns ``base`` as is
    (bit for bit blind reuse when ``base`` is the default).
    """
    n_layers = ctx.adapter.n_layers
    if len(schedule) != n_layers:
        raise ValueError(f"the schedule names {len(schedule)} layers, the model has {n_layers}")
    pf = PartialForward(ctx, base, tag)
    prev = pf.rows(())
    hidden = ctx.enc.spans[ctx.b].embeds[:0]
    for l in range(n_layers):
        rows = pf.rows(schedule[l])
        if rows.numel():
            carried = torch.isin(rows, prev)
            h = torch.empty(rows.numel(), hidden.shape[-1], dtype=hidden.dtype, device=hidden.device)
            h[carried] = hidden[torch.searchsorted(prev, rows[carried])]
            if not bool(carried.all()):
                h[~carried] = pf.entry_hidden(l, rows[~carried])
            hidden = pf.step(l, rows, h)
        else:
            hidden = hidden[:0]
        prev = rows
    return pf.result()


def recompute(ctx: ReuseContext, rows: Rows, layers: Iterable[int] | None = None, base: ChunkKV | None = None,
              tag: str = "recompute") -> Recomputed:
    """Recompute the same B rows at ``layers`` (default: every layer), in context."""
    n_layers = ctx.adapter.n_layers
    chosen = set(range(n_layers)) if layers is None else set(layers)
    bad = sorted(l for l in chosen if not 0 <= l < n_layers)
    if bad:
        raise ValueError(f"layers {bad} out of range for a {n_layers}-layer model")
    return recompute_schedule(ctx, [rows if l in chosen else () for l in range(n_layers)], base, tag)


def reuse_bottom(
    ctx: ReuseContext, reused: int, base: ChunkKV | None = None, tag: str = "recompute"
) -> Recomputed:
    """Keep B's KV in the bottom ``reused`` layers and recompute all of B's rows above them, in context.

    The in-context forward resumes at layer ``reused − 1`` (a lead-in from B's canonical hidden state,
    see :meth:`PartialForward.entry_hidden`), so the KV of layers ``reused … L−1`` carries the context.
    ``reused = 0`` re-prefills B; ``reused = L`` is blind reuse. Layer-0 KV never depends on the
    context, so ``reused = 1`` equals ``reused = 0`` up to relocation rounding."""
    n_layers = ctx.adapter.n_layers
    if not 0 <= reused <= n_layers:
        raise ValueError(f"reused layers must lie in [0, {n_layers}], got {reused}")
    return recompute(ctx, range(ctx.n_b), range(reused, n_layers), base, tag)


# ----- shared per-item passes ----------------------------------------------------------------------
@dataclass
class SoloPass:
    """B's canonical forward replayed on the engine: ``hidden[ℓ]`` [n_B, H] enters layer ℓ (ℓ = 0 … L;
    ``hidden[L]`` is the stack's output before the final norm), ``kv`` the K/V it wrote."""

    hidden: list[torch.Tensor]
    kv: ChunkKV


def solo_pass(ctx: ReuseContext) -> SoloPass:
    """Replay the canonical forward of B (behind the prefix, or alone) keeping its hidden states.

    The shared ``solo`` forward keeps only the cache; arms that resume B mid-stack need the hidden
    states it passed through, so this runs once per context (tag ``solo_hidden``). Its K/V reproduce
    ``ctx.canonical`` to float rounding (tested)."""

    def make() -> SoloPass:
        b = ctx.enc.spans[ctx.b]
        alone = ctx.canonical_context == "none" or not ctx.has_prefix
        spans = [b] if alone else [ctx.enc.spans[0], b]
        chunks = [ctx.canonical] if alone else [ctx.context_kv[0], ctx.canonical]
        drv = LayerDriver(ctx.adapter, spans, chunks, "solo_hidden")
        rows = torch.arange(drv.n_tokens - b.n_tokens, drv.n_tokens, device=ctx.adapter.device)
        hidden = [b.embeds]
        for l in range(drv.n_layers):
            hidden.append(drv.run(l, rows, hidden[-1]))
        drv.finish()
        return SoloPass(hidden, drv.read(drv.n_tokens - b.n_tokens, drv.n_tokens))

    return shared(ctx, "solo_pass", make)


def solo_hidden(ctx: ReuseContext) -> list[torch.Tensor]:
    """B's hidden states entering each layer of its canonical forward (see :func:`solo_pass`)."""
    return solo_pass(ctx).hidden


@torch.no_grad()
def attention_to(driver: LayerDriver, rows: torch.Tensor, hidden: Sequence[torch.Tensor] | torch.Tensor,
                 carry: bool, reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Attention probabilities of ``rows`` at every layer, [heads, q, S] per layer (float32).

    ``carry=True``: ``hidden`` [q, H] enters layer 0 and is carried up the stack. ``carry=False``:
    ``hidden[ℓ]`` is the input of layer ℓ (each layer probed on its own). The rows' K/V are
    written into the driver's own cache copy as they are computed. ``reduce``, if given, maps each
    layer's [heads, q, S] probabilities to what is kept, as soon as the layer has run (so a probe
    over many rows holds one layer's probabilities at a time, not every layer's)."""
    adapter = driver.adapter
    captured: list[torch.Tensor] = []

    def hook(_module, _inputs, output):
        probs = output[1][0].float()
        captured.append(probs if reduce is None else reduce(probs))

    with eager_attention(adapter):
        h = hidden if carry else None
        out = []
        for l in range(driver.n_layers):
            handle = adapter.lm.layers[l].self_attn.register_forward_hook(hook)
            try:
                h = driver.run(l, rows, h if carry else hidden[l])
            finally:
                handle.remove()
            out.append(captured.pop())
    driver.finish()
    return out


__all__ = [
    "LayerDriver",
    "PartialForward",
    "Recomputed",
    "SlotCache",
    "SlotLayer",
    "SoloPass",
    "attention_to",
    "eager_attention",
    "recompute",
    "recompute_schedule",
    "reuse_bottom",
    "shared",
    "solo_hidden",
    "solo_pass",
]
