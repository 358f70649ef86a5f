"""The deficit Δ and the rank-m conditioning patch (paper Eq. 1-2, §3, App. A).

    Δ = KV(B|A) − R(δ)·KV(B|∅)                   per layer and channel, an n_B × width matrix
    patch_m = top-m SVD factors of Δ             U_m Σ_m V_mᵀ, stored as (UΣ)_m and V_mᵀ
    reuse   = R(δ)·KV(B|∅) + (UΣ)_m V_mᵀ

Δ is formed in the frame of the conditioned forward (B at its target position), as App. A does.
One SVD per layer-channel (or per KV head) serves every rank of a sweep: ``truncate`` only slices.
Moving B and A together by δ′ rotates the keys' feature axis, so a K patch relocates by rotating
its feature-side factor alone: Δ R(δ′)ᵀ = (UΣ)(R(δ′)V)ᵀ, exact and rank-preserving.
A linear-attention hybrid's recurrent layers carry Δ_S, the state deficit (:mod:`kamera.core.state`), beside
Δ: its per-head SVD is viewed at the content rank m and added after composition, so rank 0 is blind
composition and full rank restores S(B|A).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch

from kamera.core.chunk import ChannelSpec, ChunkKV, same_positions
from kamera.core.precision import widen
from kamera.core.rope import rotate
from kamera.core.state import StateDeficit, StatePatch, state_deficit

log = logging.getLogger(__name__)

Granularity = Literal["layer", "head"]
_warned_clamps: set[tuple[int, int]] = set()


@dataclass(eq=False)
class Deficit:
    """Δ per layer and channel: ``layers[l][c]`` is float32 (float64 for a float64 model) [n, heads, dim];
    ``positions`` is B's target frame; ``state`` Δ_S of a hybrid's recurrent layers (None elsewhere)."""

    specs: tuple[ChannelSpec, ...]
    layers: list[tuple[torch.Tensor, ...]]
    positions: torch.Tensor
    state: StateDeficit | None = None

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
    if not same_positions(conditioned.positions, relocated_canonical.positions):
        raise ValueError(
            "the canonical KV is not at B's conditioned positions: relocate it by δ before forming Δ "
            f"(first positions {conditioned.positions[..., :1].tolist()} vs "
            f"{relocated_canonical.positions[..., :1].tolist()})"
        )
    layers = [
        tuple(widen(c) - widen(r) for c, r in zip(lc, lr, strict=True))
        for lc, lr in zip(conditioned.layers, relocated_canonical.layers, strict=True)
    ]
    state = None
    if conditioned.state is not None or relocated_canonical.state is not None:
        if conditioned.state is None or relocated_canonical.state is None:
            raise ValueError("only one of conditioned and canonical B carries recurrent-state pages")
        state = state_deficit(conditioned.state, relocated_canonical.state)
    return Deficit(conditioned.specs, layers, conditioned.positions.clone(), state)


def orbit_mean(deficits: Sequence[Deficit]) -> Deficit:
    """The mean Δ over a set of orderings of A (the orbit patch is the SVD of this mean, §5)."""
    if not deficits:
        raise ValueError("orbit_mean needs at least one deficit")
    first = deficits[0]
    for d in deficits[1:]:
        if d.n_tokens != first.n_tokens or not same_positions(d.positions, first.positions):
            raise ValueError("orbit deficits must share B's tokens and target positions")
    layers = [
        tuple(torch.stack([d.layers[l][c] for d in deficits]).mean(0) for c in range(len(first.specs)))
        for l in range(len(first.layers))
    ]
    state = None
    if first.state is not None:
        state = StateDeficit(
            first.state.layers,
            [torch.stack([d.state.deltas[i] for d in deficits]).mean(0) for i in range(len(first.state.layers))],
        )
    return Deficit(first.specs, layers, first.positions.clone(), state)


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

    def nbytes(self, m: int) -> int:
        return min(m, self.full_rank) * (self.us.shape[0] + self.vt.shape[1]) * self.us.element_size()

    def add(self, x: torch.Tensor, m: int, in_place: bool) -> torch.Tensor:
        """x + (UΣ)_m V_mᵀ for x [n, heads·dim]: one matmul-accumulate, into x itself when ``in_place``.

        Factors in x's dtype: the GEMM runs in that dtype (accumulating in float32 for bf16 / fp16)
        and rounds once. Factors of another dtype: computed in the wider of the two, rounded once.
        """
        us, vt = self.us[:, :m], self.vt[:m]
        if us.dtype == x.dtype and us.device == x.device:
            return x.addmm_(us, vt) if in_place else torch.addmm(x, us, vt)
        work = torch.promote_types(us.dtype, x.dtype)
        out = torch.addmm(x.to(work), us.to(x.device, work), vt.to(x.device, work)).to(x.dtype)
        return x.copy_(out) if in_place else out


def _svd(matrix: torch.Tensor, heads: int, dtype: torch.dtype) -> Factors:
    # float64 so a full-rank patch reproduces KV(B|A) to the storage dtype's rounding
    u, s, vt = torch.linalg.svd(matrix.double(), full_matrices=False)
    return Factors((u * s).to(dtype), s.float(), vt.to(dtype), heads)


def default_rotary_rank(m: int | None, attention: str) -> int | None:
    """The rank of the rotary channel that goes with content rank m (None = full stays full).

    MLA: ⌈m/4⌉ on the 64-wide k_pe band. The paper (§3): the latent c_KV alone leaves a residual
    (≈ 8× the floor) that "a small added k_pe-band patch" closes, and the patch costs ≈ 6% / 25% of
    the page at rank 16 / 64 "on either layout"; with c_KV 512 and k_pe 64 at n_B = 576, k_pe at
    ⌈m/4⌉ gives 6.0% / 24.1%, k_pe at m gives 8.3% / 33.3%. GQA / MHA: m, since K and V "both
    carry binding" (App. A patches K and V with the same rank) and then 6% / 25% hold as well.
    """
    if m is None or attention != "MLA":
        return m
    return math.ceil(m / 4)


AUTO_ROTARY = "auto"


def family_rank_view(
    patch: Patch, m: int | None, attention: str, rotary_rank: int | Literal["auto"] | None = AUTO_ROTARY
) -> Patch:
    """``patch`` viewed at content rank m and the rotary rank that goes with it: the one rank rule.

    ``rotary_rank`` ``"auto"`` (default) is :func:`default_rotary_rank` (m on GQA / MHA, ⌈m/4⌉ on MLA's
    k_pe); an int or None (full) sets it. The patch arms and every window probe view their patches
    through this, so a rank-m patch has the same bytes and the same k_pe band wherever it is measured.
    """
    rr = default_rotary_rank(m, attention) if rotary_rank == AUTO_ROTARY else rotary_rank
    return patch.truncate(m, rotary_rank=rr)


def _check_rank(m: int | None, what: str) -> None:
    if m is None:
        return
    if isinstance(m, bool) or not isinstance(m, int):
        raise TypeError(f"{what} must be an int or None, got {type(m).__name__}")
    if m < 0:
        raise ValueError(f"{what} must be ≥ 0, got {m}")


@dataclass(eq=False)
class Patch:
    """A conditioning patch: full SVD factors per layer and channel, viewed at a rank and on a layer subset.

    ``factors[l][c]`` is a tuple of blocks (one per layer-channel, or one per KV head). ``rank`` is the
    requested rank of the content channels (V, MLA c_KV: the paper's m) and ``rotary_rank`` that of
    the rotary channels (K, MLA k_pe), None = full; ``layers`` the layers that carry the patch. All
    three are views, so a rank or depth sweep never re-decomposes. ``state``: a hybrid's state patch (the
    per-head SVD of Δ_S on its recurrent layers), viewed at ``rank``; ``layers`` restricts only the
    attention layers. Factors are stored in ``dtype``
    (the model's), so the byte count is what a deployment stores; a full-rank patch is exact only
    to that dtype's rounding (bf16 factors: about 3 significant digits).
    """

    specs: tuple[ChannelSpec, ...]
    factors: list[tuple[tuple[Factors, ...], ...]]
    positions: torch.Tensor
    granularity: Granularity = "layer"
    rank: int | None = None
    rotary_rank: int | None = None
    layers: tuple[int, ...] | None = None
    state: StatePatch | None = None

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
        state = StatePatch.form(delta.state, dtype) if delta.state is not None else None
        return cls(delta.specs, factors, delta.positions.clone(), granularity, state=state)

    # ----- views: rank, layer subset, position -------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return int(self.positions.shape[-1])

    @property
    def n_layers(self) -> int:
        return len(self.factors)

    @property
    def dtype(self) -> torch.dtype:
        """The storage dtype of the factors (the model's, unless ``form`` was told otherwise)."""
        return self.factors[0][0][0].us.dtype

    @property
    def patched_layers(self) -> tuple[int, ...]:
        return tuple(range(self.n_layers)) if self.layers is None else self.layers

    @property
    def full_rank(self) -> int:
        """The largest rank any block supports: min(n_B, width) of the widest channel (or min(d_k, d_v) of a state)."""
        kv = max(b.full_rank for chans in self.factors for blocks in chans for b in blocks)
        return max(kv, self.state.full_rank) if self.state is not None else kv

    def channel_rank(self, channel: int) -> int:
        """The rank applied to channel ``channel``: its requested rank clamped to its blocks' full rank."""
        spec = self.specs[channel]
        m = self.rank if spec.rotary is None else self.rotary_rank
        full = max(blocks[channel][0].full_rank for blocks in self.factors)
        return full if m is None else min(m, full)

    def _role_rank(self, rotary: bool) -> int:
        ranks = [self.channel_rank(c) for c, s in enumerate(self.specs) if (s.rotary is not None) == rotary]
        return max(ranks, default=0)

    @property
    def effective_rank(self) -> int:
        """The rank applied to the content channels (V, MLA c_KV): the "m" of the tables and figures."""
        return self._role_rank(rotary=False)

    @property
    def effective_rotary_rank(self) -> int:
        """The rank applied to the rotary channels (K, MLA k_pe)."""
        return self._role_rank(rotary=True)

    def truncate(self, m: int | None, rotary_rank: int | Literal["same"] | None = "same") -> Patch:
        """The top-m patch (None = full rank), views only; a rank above full rank is clamped with a one-time warning.

        ``rotary_rank`` is the rank of the rotary channels: ``"same"`` (default) gives them m as well,
        the GQA / MHA rule; MLA callers pass :func:`default_rotary_rank` (⌈m/4⌉ on k_pe).
        """
        rotary_rank = m if rotary_rank == "same" else rotary_rank
        _check_rank(m, "patch rank")
        _check_rank(rotary_rank, "rotary patch rank")
        full = self.full_rank
        for r in (m, rotary_rank):
            if r is not None and r > full and (r, full) not in _warned_clamps:
                _warned_clamps.add((r, full))
                log.warning("patch rank %d exceeds min(n_B, width) = %d; clamped to full rank %d", r, full, full)
        return replace(self, rank=m, rotary_rank=rotary_rank)

    def restrict(self, layers: Iterable[int]) -> Patch:
        """The patch on a layer subset only (e.g. ``deepest(n_layers)``); other layers reuse R(δ)·KV(B|∅)."""
        keep = tuple(sorted(set(layers)))
        bad = [l for l in keep if not 0 <= l < self.n_layers]
        if bad:
            raise ValueError(f"layers {bad} out of range for a {self.n_layers}-layer patch")
        return replace(self, layers=keep)

    def relocate(self, delta: int) -> Patch:
        """The same patch for B (and A) moved by δ′: rotate the feature-side factor of rotary channels.

        δ′ = 0 is the identity and returns this patch itself, not a copy: a copy's GEMM may round differently on
        some BLAS paths (other alignment), and a patch replayed where it was formed is that patch."""
        if delta == 0:
            return self
        factors = []
        for l, chans in enumerate(self.factors):
            per_channel = []
            for blocks, spec in zip(chans, self.specs, strict=True):
                if spec.rotary is None:
                    per_channel.append(blocks)
                    continue
                moved = []
                for b in blocks:
                    vt = rotate(b.vt.reshape(b.vt.shape[0], b.heads, spec.dim), delta, spec.rotary_at(l))
                    moved.append(Factors(b.us, b.s, vt.reshape(b.vt.shape), b.heads))
                per_channel.append(tuple(moved))
            factors.append(tuple(per_channel))
        return replace(self, factors=factors, positions=self.positions + int(delta))

    # ----- use ---------------------------------------------------------------------------------
    def apply(self, base: ChunkKV, delta: int = 0) -> ChunkKV:
        """R(δ)·base + (UΣ)_m V_mᵀ per patched layer-channel: Eq. 1 with zero forwards.

        ``delta`` = 0 (default): ``base`` is the relocated canonical R(δ)·KV(B|∅), already at the
        patch's positions. ``delta`` ≠ 0: ``base`` is the canonical δ positions before them, and the
        relocation is fused in: each rotary channel is rotated into a fresh tensor and the patch is
        added into it in place; equal to ``apply(relocate(base, delta))`` to float rounding.
        Each patched layer-channel costs one matmul-accumulate in the storage dtype (per KV head
        at ``"head"`` granularity); ``base`` is never written, and channels neither rotated nor
        patched are shared with it, not copied.
        """
        if isinstance(delta, bool) or int(delta) != delta:
            raise TypeError(f"delta must be a whole number of positions, got {delta!r}")
        delta = int(delta)
        if base.n_tokens != self.n_tokens or not same_positions(base.positions + delta, self.positions):
            raise ValueError("patch and canonical KV are at different positions: relocate one onto the other first")
        if [s.name for s in base.specs] != [s.name for s in self.specs]:
            raise ValueError("patch and chunk have different channel layouts")
        ranks = [self.channel_rank(c) for c in range(len(self.specs))]
        patched = set(self.patched_layers)
        layers = []
        for l, chans in enumerate(base.layers):
            new = []
            for c, (t, spec) in enumerate(zip(chans, self.specs, strict=True)):
                m = ranks[c] if l in patched else 0
                if delta and spec.rotary is not None:
                    new.append(self._add(rotate(t, delta, spec.rotary_at(l)), l, c, m, in_place=True))
                else:
                    new.append(self._add(t, l, c, m, in_place=False))
            layers.append(tuple(new))
        state = base.state
        if self.state is not None:
            if state is None:
                raise ValueError("a state patch needs a chunk with recurrent-state pages")
            state = state.corrected(self.state.corrections(self.rank))
        return ChunkKV(base.specs, layers, self.positions, state)

    def _add(self, t: torch.Tensor, layer: int, channel: int, m: int, in_place: bool) -> torch.Tensor:
        """t [n, heads, dim] plus the rank-m patch of one layer-channel (``t`` itself when m = 0)."""
        if m == 0:
            return t
        blocks = self.factors[layer][channel]
        if not t.is_contiguous():  # a fresh contiguous copy, ours to write into
            t, in_place = t.contiguous(), True
        if len(blocks) == 1:  # one block per layer-channel: [n, heads·dim]
            return blocks[0].add(t.view(t.shape[0], -1), m, in_place).view(t.shape)
        out = t if in_place else t.clone()
        for h, b in enumerate(blocks):  # "head" granularity: one [n, dim] block per KV head
            b.add(out[:, h], m, in_place=True)
        return out

    def nbytes_by_channel(self) -> dict[str, int]:
        """Stored bytes per channel: Σ over patched layers and blocks of r_c·(n_B + block width), r_c its rank
        (a hybrid's ``state``: Σ over recurrent layers and heads of m·(d_k + d_v))."""
        out = {
            spec.name: sum(b.nbytes(self.channel_rank(c)) for l in self.patched_layers for b in self.factors[l][c])
            for c, spec in enumerate(self.specs)
        }
        if self.state is not None:
            out["state"] = self.state.nbytes(self.rank)
        return out

    def nbytes(self) -> int:
        """Stored bytes of the whole patch in the storage dtype (both channels)."""
        return sum(self.nbytes_by_channel().values())

    def bytes_fraction(self, page: ChunkKV) -> float:
        """Patch bytes as a fraction of B's full KV page in the model's own layout."""
        return self.nbytes() / page.nbytes()

    def energy_captured(self) -> dict[tuple[int, str], float]:
        """Per patched (layer, channel): fraction of ‖Δ‖² the kept rank captures (1.0 where Δ = 0)."""
        out = {}
        for l in self.patched_layers:
            for c, (blocks, spec) in enumerate(zip(self.factors[l], self.specs, strict=True)):
                m = self.channel_rank(c)
                total = sum(float((b.s**2).sum()) for b in blocks)
                kept = sum(float((b.s[:m] ** 2).sum()) for b in blocks)
                out[(l, spec.name)] = 1.0 if total == 0 else kept / total
        if self.state is not None:
            out.update({(l, "state"): e for l, e in self.state.energy(self.rank).items()})
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
