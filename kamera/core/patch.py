"""The deficit Δ and the rank-m conditioning patch (paper Eq. 1-2, §3, App. A).

    Δ = KV(B|A) − R(δ)·KV(B|∅)                   per layer and channel, an n_B × width matrix
    patch_m = top-m SVD factors of Δ             U_m Σ_m V_mᵀ, stored as (UΣ)_m and V_mᵀ
    reuse   = R(δ)·KV(B|∅) + (UΣ)_m V_mᵀ

Δ is formed in the frame of the conditioned forward (B at its target position), as App. A does.
One SVD per layer-channel (or per KV head) serves every rank of a sweep: ``truncate`` only slices.
Moving B and A together by δ′ rotates the keys' feature axis, so a K patch relocates by rotating
its feature-side factor alone: Δ R(δ′)ᵀ = (UΣ)(R(δ′)V)ᵀ, exact and rank-preserving.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch

from kamera.core.chunk import ChannelSpec, ChunkKV
from kamera.core.rope import rotate

log = logging.getLogger(__name__)

Granularity = Literal["layer", "head"]
_warned_clamps: set[tuple[int, int]] = set()


@dataclass(eq=False)
class Deficit:
    """Δ per layer and channel: ``layers[l][c]`` is float32 [n, heads, dim]; ``positions`` is B's target frame."""

    specs: tuple[ChannelSpec, ...]
    layers: list[tuple[torch.Tensor, ...]]
    positions: torch.Tensor

    @property
    def n_tokens(self) -> int:
        return int(self.positions.shape[-1])

    def matrix(self, layer: int, channel: int) -> torch.Tensor:
        """Δ of one layer-channel as the n × width matrix the SVD decomposes."""
        t = self.layers[layer][channel]
        return t.reshape(t.shape[0], -1)

    def frobenius(self) -> list[tuple[float, ...]]:
        """‖Δ‖_F per layer and channel."""
        return [tuple(float(t.norm()) for t in chans) for chans in self.layers]


def deficit(conditioned: ChunkKV, relocated_canonical: ChunkKV) -> Deficit:
    """Δ = KV(B|A) − R(δ)·KV(B|∅); both must sit at the same (target) positions."""
    if conditioned.n_tokens != relocated_canonical.n_tokens:
        raise ValueError(
            f"conditioned B has {conditioned.n_tokens} tokens, canonical B has {relocated_canonical.n_tokens}"
        )
    if not torch.equal(conditioned.positions, relocated_canonical.positions):
        raise ValueError(
            "the canonical KV is not at B's conditioned positions: relocate it by δ before forming Δ "
            f"(first positions {conditioned.positions[..., :1].tolist()} vs {relocated_canonical.positions[..., :1].tolist()})"
        )
    layers = [
        tuple(c.float() - r.float() for c, r in zip(lc, lr, strict=True))
        for lc, lr in zip(conditioned.layers, relocated_canonical.layers, strict=True)
    ]
    return Deficit(conditioned.specs, layers, conditioned.positions.clone())


def orbit_mean(deficits: Sequence[Deficit]) -> Deficit:
    """The mean Δ over a set of orderings of A (the orbit patch is the SVD of this mean, §5)."""
    if not deficits:
        raise ValueError("orbit_mean needs at least one deficit")
    first = deficits[0]
    for d in deficits[1:]:
        if d.n_tokens != first.n_tokens or not torch.equal(d.positions, first.positions):
            raise ValueError("orbit deficits must share B's tokens and target positions")
    layers = [
        tuple(torch.stack([d.layers[l][c] for d in deficits]).mean(0) for c in range(len(first.specs)))
        for l in range(len(first.layers))
    ]
    return Deficit(first.specs, layers, first.positions.clone())


@dataclass(eq=False)
class Factors:
    """Full SVD of one block of Δ: ``us`` [n, r] = UΣ and ``vt`` [r, heads·dim] in storage dtype; ``s`` [r] float32."""

    us: torch.Tensor
    s: torch.Tensor
    vt: torch.Tensor
    heads: int

    @property
    def full_rank(self) -> int:
        return int(self.s.numel())

    def product(self, m: int) -> torch.Tensor:
        """(UΣ)_m V_mᵀ in float32, [n, heads·dim]."""
        return self.us[:, :m].float() @ self.vt[:m].float()

    def nbytes(self, m: int) -> int:
        return min(m, self.full_rank) * (self.us.shape[0] + self.vt.shape[1]) * self.us.element_size()


def _svd(matrix: torch.Tensor, heads: int, dtype: torch.dtype) -> Factors:
    # float64 so a full-rank patch reproduces KV(B|A) to the storage dtype's rounding
    u, s, vt = torch.linalg.svd(matrix.double(), full_matrices=False)
    return Factors((u * s).to(dtype), s.float(), vt.to(dtype), heads)


@dataclass(eq=False)
class Patch:
    """A conditioning patch: full SVD factors per layer and channel, viewed at a rank and on a layer subset.

    ``factors[l][c]`` is a tuple of blocks (one per layer-channel, or one per KV head). ``rank`` is the
    requested rank (None = full) and ``layers`` the layers that carry the patch; both are views, so a
    rank or depth sweep never re-decomposes. Factors are stored in ``dtype`` (the model's), so the
    byte count is what a deployment stores.
    """

    specs: tuple[ChannelSpec, ...]
    factors: list[tuple[tuple[Factors, ...], ...]]
    positions: torch.Tensor
    granularity: Granularity = "layer"
    rank: int | None = None
    layers: tuple[int, ...] | None = None

    @classmethod
    def form(cls, delta: Deficit, granularity: Granularity = "layer", dtype: torch.dtype | None = None) -> Patch:
        """One SVD per layer-channel (``"layer"``) or per KV head (``"head"``), kept at full rank."""
        if granularity not in ("layer", "head"):
            raise ValueError(f"granularity must be 'layer' or 'head', got {granularity!r}")
        dtype = dtype or torch.float32
        factors = []
        for chans in delta.layers:
            per_channel = []
            for t, spec in zip(chans, delta.specs, strict=True):
                if granularity == "layer":
                    per_channel.append((_svd(t.reshape(t.shape[0], -1), spec.heads, dtype),))
                else:
                    per_channel.append(tuple(_svd(t[:, h], 1, dtype) for h in range(spec.heads)))
            factors.append(tuple(per_channel))
        return cls(delta.specs, factors, delta.positions.clone(), granularity)

    # ----- views: rank, layer subset, position -------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return int(self.positions.shape[-1])

    @property
    def n_layers(self) -> int:
        return len(self.factors)

    @property
    def patched_layers(self) -> tuple[int, ...]:
        return tuple(range(self.n_layers)) if self.layers is None else self.layers

    @property
    def full_rank(self) -> int:
        """The largest rank any block supports: min(n_B, width) of the widest channel."""
        return max(b.full_rank for chans in self.factors for blocks in chans for b in blocks)

    @property
    def effective_rank(self) -> int:
        """The rank actually applied (the requested rank clamped to ``full_rank``)."""
        return self.full_rank if self.rank is None else min(self.rank, self.full_rank)

    def truncate(self, m: int | None) -> Patch:
        """The top-m patch (None = full rank); a rank above full rank is clamped with a one-time warning."""
        if m is not None:
            if isinstance(m, bool) or not isinstance(m, int):
                raise TypeError(f"patch rank must be an int or None, got {type(m).__name__}")
            if m < 0:
                raise ValueError(f"patch rank must be ≥ 0, got {m}")
            full = self.full_rank
            if m > full and (m, full) not in _warned_clamps:
                _warned_clamps.add((m, full))
                log.warning("patch rank %d exceeds min(n_B, width) = %d; clamped to full rank %d", m, full, full)
        return replace(self, rank=m)

    def restrict(self, layers: Iterable[int]) -> Patch:
        """The patch on a layer subset only (e.g. ``deepest(n_layers)``); other layers reuse R(δ)·KV(B|∅)."""
        keep = tuple(sorted(set(layers)))
        bad = [l for l in keep if not 0 <= l < self.n_layers]
        if bad:
            raise ValueError(f"layers {bad} out of range for a {self.n_layers}-layer patch")
        return replace(self, layers=keep)

    def relocate(self, delta: int) -> Patch:
        """The same patch for B (and A) moved by δ′: rotate the feature-side factor of rotary channels."""
        factors = []
        for chans in self.factors:
            per_channel = []
            for blocks, spec in zip(chans, self.specs, strict=True):
                if spec.rotary is None:
                    per_channel.append(blocks)
                    continue
                moved = []
                for b in blocks:
                    vt = rotate(b.vt.reshape(b.vt.shape[0], b.heads, spec.dim), delta, spec.rotary)
                    moved.append(Factors(b.us, b.s, vt.reshape(b.vt.shape), b.heads))
                per_channel.append(tuple(moved))
            factors.append(tuple(per_channel))
        return replace(self, factors=factors, positions=self.positions + int(delta))

    # ----- use ---------------------------------------------------------------------------------
    def apply(self, base: ChunkKV) -> ChunkKV:
        """R(δ)·KV(B|∅) + (UΣ)_m V_mᵀ; ``base`` must be the relocated canonical at the patch's positions."""
        if base.n_tokens != self.n_tokens or not torch.equal(base.positions, self.positions):
            raise ValueError("patch and canonical KV are at different positions: relocate one onto the other first")
        if [s.name for s in base.specs] != [s.name for s in self.specs]:
            raise ValueError("patch and chunk have different channel layouts")
        m = self.effective_rank
        layers = list(base.layers)
        if m == 0:
            return base.with_layers(layers)
        for l in self.patched_layers:
            new = []
            for t, blocks in zip(base.layers[l], self.factors[l], strict=True):
                # one block [n, heads·dim] per layer-channel, or one [n, dim] block per head
                corr = torch.stack([b.product(m) for b in blocks], dim=1)
                new.append((t.float() + corr.reshape(t.shape).to(t.device)).to(t.dtype))
            layers[l] = tuple(new)
        return base.with_layers(layers)

    def nbytes(self) -> int:
        """Stored bytes: Σ over patched layer-channel blocks of m·(n_B + block width) in the storage dtype."""
        m = self.effective_rank
        return sum(b.nbytes(m) for l in self.patched_layers for blocks in self.factors[l] for b in blocks)

    def bytes_fraction(self, page: ChunkKV) -> float:
        """Patch bytes as a fraction of B's full KV page in the model's own layout."""
        return self.nbytes() / page.nbytes()

    def energy_captured(self) -> dict[tuple[int, str], float]:
        """Per patched (layer, channel): fraction of ‖Δ‖² the kept rank captures (1.0 where Δ = 0)."""
        m = self.effective_rank
        out = {}
        for l in self.patched_layers:
            for blocks, spec in zip(self.factors[l], self.specs, strict=True):
                total = sum(float((b.s**2).sum()) for b in blocks)
                kept = sum(float((b.s[:m] ** 2).sum()) for b in blocks)
                out[(l, spec.name)] = 1.0 if total == 0 else kept / total
        return out


def singular_values(delta: Deficit) -> dict[tuple[int, str], torch.Tensor]:
    """σ of Δ per (layer, channel) as the n × width matrix, float32 descending."""
    return {
        (l, spec.name): torch.linalg.svdvals(delta.matrix(l, c))
        for l in range(len(delta.layers))
        for c, spec in enumerate(delta.specs)
    }


def deepest(n_layers: int, fraction: float = 0.5) -> list[int]:
    """The deepest ⌈fraction·n_layers⌉ layer indices (the paper's deep-half patch is fraction 0.5)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    k = math.ceil(fraction * n_layers)
    return list(range(n_layers - k, n_layers))
