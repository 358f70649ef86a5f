"""Reuse of a Gated DeltaNet layer's recurrent state: exact composition, the state deficit, its rank-m patch.

A linear-attention (Gated DeltaNet) layer caches no K/V; after a run of tokens it holds a recurrent state
S [H, d_k, d_v] per value head and a conv state (its last kernel − 1 pre-conv inputs). Per token t, with
the key k_t l2-normalised, gate g_t ≤ 0 (log space) and write strength β_t ∈ (0, 1)
(transformers ``models/qwen3_5/modeling_qwen3_5.py``: ``Qwen3_5GatedDeltaNet.forward`` and
``torch_recurrent_gated_delta_rule``, the same rule as ``qwen3_next``)::

    S_t = M_t S_{t−1} + β_t k_t v_tᵀ,        M_t = e^{g_t} (I − β_t k_t k_tᵀ)       [d_k, d_k] per head

The recurrence is linear in the state, so the state after a chunk B entered with S_A is exactly::

    S(B | S_A) = T_B S_A + S(B | 0),         T_B = M_n ⋯ M_1                          (compose)

(the issue's S_A·T_B + S(B|∅) in the transposed convention). T_B and S(B | 0) are one scan of the
augmented state X = [T | S] from [I | 0] with values [0 | v]: the chunkwise form of the recurrence.

The conv boundary. B's token t reads the pre-conv inputs t − K + 1 … t (K = ``linear_conv_kernel_dim``),
so B's first h = min(K − 1, n) tokens read the predecessor's last inputs. They are recomputed behind the
predecessor at composition time: a :class:`StatePage` keeps those h tokens' raw inputs (``head``), and
T, S(· | 0) only of the tail (tokens h … n), whose features are B's own. Composition is then exact
whatever precedes B: at the first layer (whose inputs are the embeddings) the composed state is the
conditioned one, and when nothing new precedes B it is B's own state. The conv state after B is B's own
last K − 1 inputs (the predecessor's fill in when n < K − 1).

What composition cannot repair is the deficit carried by B's inputs at deeper layers (they were computed
without A): Δ_S = S(B | A) − compose(S_A, B's canonical page), one [d_k, d_v] matrix per head. Its top-m
SVD per head (:class:`StatePatch`) is the linear-attention analogue of the KV patch (the paper's
"state-delta"); full rank restores S(B | A), rank 0 is blind composition.

Shapes: inputs of n tokens are ``mixed`` [n, conv_dim] (``in_proj_qkv``'s output before the conv),
``b``, ``a`` [n, H] (``in_proj_b`` / ``in_proj_a``); conv_dim = 2·H_k·d_k + H·d_v. States are float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F


@dataclass(frozen=True, eq=False)
class DeltaRuleSpec:
    """The fixed parameters of one Gated DeltaNet layer that composition reads.

    ``conv_weight`` [conv_dim, K] (depthwise, no bias in Qwen3.5), ``a_log`` and ``dt_bias`` [H] (the gate
    g = −e^{A_log}·softplus(a + dt_bias)); H_k key heads of ``key_dim``, H value heads of ``value_dim``
    (each key head serves H / H_k consecutive value heads).
    """

    layer: int
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv_weight: torch.Tensor
    a_log: torch.Tensor
    dt_bias: torch.Tensor

    @property
    def kernel(self) -> int:
        return int(self.conv_weight.shape[-1])

    @property
    def conv_dim(self) -> int:
        return int(self.conv_weight.shape[0])


@dataclass(eq=False)
class LayerInputs:
    """One layer's per-token inputs over a run of tokens: ``mixed`` [n, conv_dim], ``b`` and ``a`` [n, H]."""

    mixed: torch.Tensor
    b: torch.Tensor
    a: torch.Tensor

    @property
    def n_tokens(self) -> int:
        return int(self.mixed.shape[0])

    def slice(self, start: int, stop: int) -> LayerInputs:
        return LayerInputs(self.mixed[start:stop], self.b[start:stop], self.a[start:stop])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.mixed, self.b, self.a))


@dataclass(eq=False)
class Carry:
    """What a layer carries into the next chunk: the recurrent ``state`` [H, d_k, d_v] (float32) and the
    last K − 1 pre-conv inputs ``history`` [K − 1, conv_dim] (zeros before the first token)."""

    state: torch.Tensor
    history: torch.Tensor

    @classmethod
    def zero(cls, spec: DeltaRuleSpec, dtype: torch.dtype, device: torch.device) -> Carry:
        state = torch.zeros(spec.value_heads, spec.key_dim, spec.value_dim, dtype=torch.float32, device=device)
        return cls(state, torch.zeros(spec.kernel - 1, spec.conv_dim, dtype=dtype, device=device))


def features(spec: DeltaRuleSpec, history: torch.Tensor, x: LayerInputs) -> tuple[torch.Tensor, ...]:
    """Keys [n, H, d_k] (l2-normalised, repeated to value heads), values [n, H, d_v], β and g [n, H], float32,
    of ``x``'s tokens read behind ``history`` (the K − 1 pre-conv inputs before them), as the layer computes them:
    depthwise causal conv in the weight's dtype, SiLU, split into q | k | v, l2norm of k in float32."""
    seq = torch.cat([history.to(x.mixed.dtype), x.mixed]).T[None]  # [1, conv_dim, K − 1 + n]
    w = spec.conv_weight
    out = F.silu(F.conv1d(seq.to(w.dtype), w[:, None], groups=spec.conv_dim)).to(x.mixed.dtype)[0].T  # [n, conv_dim]
    kd, vd = spec.key_heads * spec.key_dim, spec.value_heads * spec.value_dim
    _, k, v = torch.split(out, [kd, kd, vd], dim=-1)
    n, rep = x.n_tokens, spec.value_heads // spec.key_heads
    k = k.reshape(n, spec.key_heads, spec.key_dim).float()
    k = (k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(rep, dim=1)
    v = v.reshape(n, spec.value_heads, spec.value_dim).float()
    beta = x.b.sigmoid().float()
    g = -spec.a_log.float().exp() * F.softplus(x.a.float() + spec.dt_bias.float())
    return k, v, beta, g


def scan(state: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor,
         chunk: int = 64) -> torch.Tensor:
    """The gated delta rule over n tokens from ``state`` [H, d_k, W] (v [n, H, W]; W = d_v, or d_k + d_v for the
    augmented [T | S] scan): per token S ← e^{g}S, then S ← S + β k (v − Sᵀk)ᵀ. Returns the state after the last token.

    Computed ``chunk`` tokens at a time in the chunkwise (UT-transform) form transformers'
    ``torch_chunk_gated_delta_rule`` uses: within a chunk with cumulative log-decay γ,
    L = strictly-lower[β_i k_iᵀk_j e^{γ_i − γ_j}] and U = (I + L)⁻¹(β v), W = (I + L)⁻¹(β k e^{γ});
    then S ← e^{γ_C} S + (k e^{γ_C − γ})ᵀ (U − W S).
    """
    s = state.clone()
    for c0 in range(0, k.shape[0], chunk):
        kc, vc = k[c0 : c0 + chunk].transpose(0, 1), v[c0 : c0 + chunk].transpose(0, 1)  # [H, C, d_k], [H, C, W]
        bc, cum = beta[c0 : c0 + chunk].T, g[c0 : c0 + chunk].T.cumsum(-1)  # [H, C]
        n = kc.shape[1]
        upper = torch.ones(n, n, dtype=torch.bool, device=kc.device).triu(1)
        decay = (cum[:, :, None] - cum[:, None, :]).masked_fill(upper, float("-inf")).exp()  # e^{γ_i − γ_j}, j ≤ i
        system = (bc[:, :, None] * (kc @ kc.transpose(1, 2))) * decay  # its unit diagonal is implied below
        rhs = torch.cat([bc[:, :, None] * vc, bc[:, :, None] * kc * cum.exp()[:, :, None]], dim=-1)
        sol = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
        u, w = sol[..., : vc.shape[-1]], sol[..., vc.shape[-1] :]
        last = cum[:, -1:]
        s = s * last.exp()[:, :, None] + (kc * (last - cum).exp()[:, :, None]).transpose(1, 2) @ (u - w @ s)
    return s


@dataclass(eq=False)
class StatePage:
    """One chunk's reuse object at one GDN layer: what its tokens add to the state, behind any predecessor.

    ``head``: raw inputs of the first min(K − 1, n) tokens (their conv reads the predecessor); ``transition``
    T [H, d_k, d_k] and ``state`` S(tail | 0) [H, d_k, d_v] of the remaining tokens; ``conv`` the chunk's last
    min(n, K − 1) pre-conv inputs; ``correction`` [H, d_k, d_v] added after composition (a state patch).
    """

    head: LayerInputs
    transition: torch.Tensor
    state: torch.Tensor
    conv: torch.Tensor
    n_tokens: int
    correction: torch.Tensor | None = None

    def nbytes(self) -> int:
        """Bytes a deployment stores for this chunk at this layer (T, S(·|0), the head's inputs, the conv tail)."""
        return self.head.nbytes() + sum(t.numel() * t.element_size() for t in (self.transition, self.state, self.conv))


def page(spec: DeltaRuleSpec, x: LayerInputs) -> StatePage:
    """The :class:`StatePage` of a chunk from its per-token inputs (one augmented scan of its tail)."""
    n, h = x.n_tokens, min(spec.kernel - 1, x.n_tokens)
    k, v, beta, g = features(spec, x.mixed.new_zeros(spec.kernel - 1, spec.conv_dim), x)
    hv, dk, dv = spec.value_heads, spec.key_dim, spec.value_dim
    start = torch.zeros(hv, dk, dk + dv, dtype=torch.float32, device=x.mixed.device)
    start[:, :, :dk] = torch.eye(dk, device=x.mixed.device)
    aug_v = torch.cat([torch.zeros(n - h, hv, dk, device=v.device), v[h:]], dim=-1)
    ts = scan(start, k[h:], aug_v, beta[h:], g[h:])
    return StatePage(
        x.slice(0, h),
        ts[:, :, :dk].contiguous(),
        ts[:, :, dk:].contiguous(),
        x.mixed[n - min(n, spec.kernel - 1) :].clone(),
        n,
    )


def compose(spec: DeltaRuleSpec, prev: Carry, p: StatePage) -> Carry:
    """The carry after chunk ``p`` behind ``prev``: the head recomputed behind prev's inputs and state, then
    S = T·S_head + S(tail | 0) (+ the page's correction); the conv history is the last K − 1 inputs."""
    k, v, beta, g = features(spec, prev.history, p.head)
    s = scan(prev.state, k, v, beta, g)
    s = torch.bmm(p.transition, s) + p.state
    if p.correction is not None:
        s = s + p.correction
    history = torch.cat([prev.history, p.conv.to(prev.history.dtype)])[-(spec.kernel - 1) :]
    return Carry(s, history)


@dataclass(eq=False)
class ChunkState:
    """A chunk's GDN-layer pages: ``pages[i]`` is layer ``specs[i].layer``'s; ``before`` the carries entering the
    chunk where it was read from a forward (None for a chunk that will be composed behind another context)."""

    specs: tuple[DeltaRuleSpec, ...]
    pages: list[StatePage]
    before: list[Carry] | None = None

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(s.layer for s in self.specs)

    def nbytes(self) -> int:
        return sum(p.nbytes() for p in self.pages)

    def after(self) -> list[Carry]:
        """The carries leaving the chunk in the context it was read from (needs ``before``)."""
        if self.before is None:
            raise ValueError("this chunk's state was not read from a forward: it has no incoming state to compose onto")
        return [compose(s, c, p) for s, c, p in zip(self.specs, self.before, self.pages, strict=True)]

    def corrected(self, corrections: Sequence[torch.Tensor | None]) -> ChunkState:
        """The same pages with a state correction added after composition (the patch's Eq. 1 for GDN layers)."""
        pages = [
            p if c is None else replace(p, correction=c if p.correction is None else p.correction + c)
            for p, c in zip(self.pages, corrections, strict=True)
        ]
        return ChunkState(self.specs, pages, self.before)


def fold(chunks: Sequence[ChunkState], dtype: torch.dtype, device: torch.device) -> list[Carry]:
    """The carries after chunks laid end to end from an empty state (what a spliced cache holds)."""
    if not chunks:
        raise ValueError("fold needs at least one chunk")
    specs = chunks[0].specs
    carries = [Carry.zero(s, dtype, device) for s in specs]
    for c in chunks:
        carries = [compose(s, prev, p) for s, prev, p in zip(specs, carries, c.pages, strict=True)]
    return carries


@dataclass(eq=False)
class StateDeficit:
    """Δ_S = S(B | A) − compose(S_A, B's relocated canonical page) per GDN layer, float32 [H, d_k, d_v]."""

    layers: tuple[int, ...]
    deltas: list[torch.Tensor]


def state_deficit(conditioned: ChunkState, canonical: ChunkState) -> StateDeficit:
    """Δ_S of each GDN layer: the conditioned chunk's own state minus its canonical page composed behind the same
    incoming state (the conditioned chunk's ``before``, i.e. S_A)."""
    if conditioned.layers != canonical.layers:
        raise ValueError(f"GDN layers differ: {conditioned.layers} vs {canonical.layers}")
    if conditioned.before is None:
        raise ValueError("the conditioned chunk carries no incoming state (read it from the full forward)")
    deltas = [
        compose(s, c, cond).state - compose(s, c, canon).state
        for s, c, cond, canon in zip(
            conditioned.specs, conditioned.before, conditioned.pages, canonical.pages, strict=True
        )
    ]
    return StateDeficit(conditioned.layers, deltas)


@dataclass(eq=False)
class StatePatch:
    """The full SVD of Δ_S per layer and value head: ``us`` [H, d_k, r] = UΣ, ``vt`` [H, r, d_v] (storage dtype),
    ``s`` [H, r] float32; a view at rank m adds (UΣ)_m V_mᵀ per head (rank 0: nothing, blind composition)."""

    layers: tuple[int, ...]
    us: list[torch.Tensor]
    s: list[torch.Tensor]
    vt: list[torch.Tensor]

    @classmethod
    def form(cls, delta: StateDeficit, dtype: torch.dtype) -> StatePatch:
        us, ss, vts = [], [], []
        for d in delta.deltas:
            u, s, vt = torch.linalg.svd(d.double(), full_matrices=False)  # float64, as the KV patch
            us.append((u * s[:, None, :]).to(dtype))
            ss.append(s.float())
            vts.append(vt.to(dtype))
        return cls(delta.layers, us, ss, vts)

    @property
    def full_rank(self) -> int:
        return max((int(s.shape[-1]) for s in self.s), default=0)

    def rank(self, m: int | None) -> int:
        return self.full_rank if m is None else min(m, self.full_rank)

    def corrections(self, m: int | None) -> list[torch.Tensor | None]:
        """(UΣ)_m V_mᵀ per layer, float32 [H, d_k, d_v] (None at rank 0)."""
        r = self.rank(m)
        if r == 0:
            return [None] * len(self.layers)
        return [torch.bmm(u[:, :, :r].float(), vt[:, :r].float()) for u, vt in zip(self.us, self.vt, strict=True)]

    def nbytes(self, m: int | None) -> int:
        """Stored bytes at rank m: Σ over layers and heads of r·(d_k + d_v) in the storage dtype."""
        r = self.rank(m)
        return sum(
            r * u.shape[0] * (u.shape[1] + vt.shape[2]) * u.element_size()
            for u, vt in zip(self.us, self.vt, strict=True)
        )

    def energy(self, m: int | None) -> dict[int, float]:
        """Per layer: the fraction of ‖Δ_S‖² the kept rank captures (1.0 where Δ_S = 0)."""
        r = self.rank(m)
        out = {}
        for layer, s in zip(self.layers, self.s, strict=True):
            total = float((s**2).sum())
            out[layer] = 1.0 if total == 0 else float((s[:, :r] ** 2).sum()) / total
        return out
