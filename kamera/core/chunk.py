"""The chunk-KV object: one chunk's cached KV as content and rotary channels, plus positions.

Every family is read through the same split (paper §3, Fig. 2):
- GQA / MHA: channel ``k`` (rotary, [n, kv_heads, head_dim]) and ``v`` (content).
- MLA: channel ``c_kv`` (content, the latent, [n, 1, kv_lora_rank]) and ``k_pe`` (rotary, [n, 1, rope_dim]).
Tensors are token-major, [n_tokens, heads, dim], so a channel flattens to the n × width matrix
the deficit and its SVD work on. Positions are [n] (1-D RoPE) or [3, n] (M-RoPE t, h, w).
A linear-attention hybrid (Gated DeltaNet) lists only its attention layers in ``layers``; its recurrent
layers' per-chunk pages are ``state`` (:class:`~kamera.core.state.ChunkState`), position-free, so
relocation leaves them as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kamera.core.rope import RotarySpec, rotate
from kamera.core.state import ChunkState


@dataclass(frozen=True, eq=False)
class ChannelSpec:
    """One cached channel of a layer; ``rotary`` is None for a content (never rotated) channel."""

    name: str
    heads: int
    dim: int
    rotary: RotarySpec | None = None
    per_layer: tuple[RotarySpec, ...] | None = None  # each layer's rotary where the layers' frequencies differ

    @property
    def width(self) -> int:
        return self.heads * self.dim

    def rotary_at(self, layer: int) -> RotarySpec | None:
        """This channel's rotary spec at ``layer``: ``per_layer[layer]`` when the model rotates its layers with
        different frequencies (Gemma-3n: sliding-window layers θ = 10⁴, global ones 10⁶, same layout and dim as
        ``rotary``), else ``rotary``."""
        return self.rotary if self.per_layer is None else self.per_layer[layer]


@dataclass(eq=False)
class ChunkKV:
    """KV of one chunk: ``layers[l][c]`` is [n, heads, dim] for ``specs[c]``; ``positions`` [n] or [3, n];
    ``state`` the recurrent layers' pages of a linear-attention hybrid (None for every other family)."""

    specs: tuple[ChannelSpec, ...]
    layers: list[tuple[torch.Tensor, ...]]
    positions: torch.Tensor
    state: ChunkState | None = None

    def __post_init__(self) -> None:
        n = self.positions.shape[-1]
        for l, chans in enumerate(self.layers):
            if len(chans) != len(self.specs):
                raise ValueError(f"layer {l} has {len(chans)} channels, specs name {len(self.specs)}")
            for t, s in zip(chans, self.specs, strict=True):
                if tuple(t.shape) != (n, s.heads, s.dim):
                    raise ValueError(
                        f"layer {l} channel {s.name!r} has shape {tuple(t.shape)}, expected {(n, s.heads, s.dim)}"
                    )

    @property
    def n_tokens(self) -> int:
        return int(self.positions.shape[-1])

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def dtype(self) -> torch.dtype:
        return self.layers[0][0].dtype

    def channel(self, layer: int, name: str) -> torch.Tensor:
        """The [n, heads, dim] tensor of channel ``name`` at ``layer``."""
        return self.layers[layer][self.channel_index(name)]

    def channel_index(self, name: str) -> int:
        for i, s in enumerate(self.specs):
            if s.name == name:
                return i
        raise KeyError(f"no channel {name!r}; channels are {[s.name for s in self.specs]}")

    def nbytes(self) -> int:
        """Bytes of this chunk's page in the model's own cache layout and dtype (a hybrid's state pages included)."""
        kv = sum(t.numel() * t.element_size() for chans in self.layers for t in chans)
        return kv + (self.state.nbytes() if self.state is not None else 0)

    def slice(self, start: int, stop: int) -> ChunkKV:
        """Tokens [start, stop) of this chunk (views, no copy)."""
        if self.state is not None:
            raise ValueError(
                "a chunk with recurrent-state pages cannot be sliced by token (its state sums all of them)"
            )
        return ChunkKV(
            self.specs,
            [tuple(t[start:stop] for t in chans) for chans in self.layers],
            self.positions[..., start:stop],
        )

    def with_layers(self, layers: list[tuple[torch.Tensor, ...]]) -> ChunkKV:
        """The same chunk (specs, positions, state pages) carrying other per-layer tensors."""
        return ChunkKV(self.specs, layers, self.positions, self.state)


def same_positions(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two position tensors ([n] or [3, n]) name the same positions, to float32 rounding.

    Positions are whole numbers on every family but one: Qwen-Omni's video time is the frame's absolute
    seconds × ``position_id_per_seconds`` in float32 (transformers' ``Qwen3OmniMoe…get_rope_index``), so
    a chunk's positions formed in context (p + b_start) and relocated from the canonical
    ((p + canonical_start) + δ) can differ in the last bit. A few float32 ulps of the largest position are
    accepted; whole-number positions still have to be equal, since any real mistake is ≥ 1 position.
    """
    if a.shape != b.shape:
        return False
    if not (a.is_floating_point() or b.is_floating_point()):
        return bool(torch.equal(a, b))
    a64, b64 = a.double(), b.double()
    scale = max(1.0, float(a64.abs().max()) if a64.numel() else 1.0)
    return bool(((a64 - b64).abs() <= 4 * torch.finfo(torch.float32).eps * scale).all())


def relocate(chunk: ChunkKV, delta: int) -> ChunkKV:
    """R(δ)·KV: rotate every rotary channel by δ positions; content channels and state pages are shared, not copied."""
    layers = [
        tuple(
            t if s.rotary is None else rotate(t, delta, s.rotary_at(l)) for t, s in zip(chans, chunk.specs, strict=True)
        )
        for l, chans in enumerate(chunk.layers)
    ]
    return ChunkKV(chunk.specs, layers, chunk.positions + int(delta), chunk.state)


def concat(chunks: Sequence[ChunkKV]) -> ChunkKV:
    """Chunks laid end to end along the token axis (their positions kept as they are)."""
    if not chunks:
        raise ValueError("concat needs at least one chunk")
    if any(c.state is not None for c in chunks):
        raise ValueError("chunks with recurrent-state pages are composed by the adapter's cache, not concatenated")
    specs = chunks[0].specs
    if any(c.specs is not specs and [s.name for s in c.specs] != [s.name for s in specs] for c in chunks):
        raise ValueError("cannot concatenate chunks with different channel layouts")
    n_layers = chunks[0].n_layers
    layers = [
        tuple(torch.cat([c.layers[l][i] for c in chunks], dim=0) for i in range(len(specs))) for l in range(n_layers)
    ]
    return ChunkKV(specs, layers, torch.cat([c.positions for c in chunks], dim=-1))


def max_abs_diff(a: ChunkKV, b: ChunkKV) -> dict[str, float]:
    """Largest |a − b| per channel over all layers (float32), for exactness checks."""
    out = {}
    for i, s in enumerate(a.specs):
        out[s.name] = max(
            float((la[i].float() - lb[i].float()).abs().max()) for la, lb in zip(a.layers, b.layers, strict=True)
        )
    return out


def max_rel_diff(a: ChunkKV, b: ChunkKV) -> dict[str, float]:
    """max|a − b| / max|b| per channel, worst layer, for exactness checks across scales."""
    out = {}
    for i, s in enumerate(a.specs):
        out[s.name] = max(
            float((la[i].float() - lb[i].float()).abs().max() / lb[i].float().abs().max().clamp_min(1e-30))
            for la, lb in zip(a.layers, b.layers, strict=True)
        )
    return out
