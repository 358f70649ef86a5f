"""Per layer and channel: Δ's top-k singular values and right singular vectors, for the shared basis (App. C.2, §4).

A basis pooled over items is a cross-item quantity, so the probe only records each item's summary and
``experiments/basis.py`` fits the basis on one split of the items and evaluates it on the rest: the Gram
Σ_items V_k diag(s_k²) V_kᵀ per layer-channel, its top-r eigenvectors W, and the share of a held-out item's
‖Δ‖² that Δ W Wᵀ keeps against its own rank-r SVD. ``s`` and ``v`` are JSON lists (the top-k σ, and the k unit
rows of V_kᵀ over the channel's heads·dim), ``energy`` is ‖Δ‖² over every singular value, not only the kept ones.

Two frames (``key_frame``): ``native`` is Δ as the cache holds it, keys rotated to each token's position (read from the
item's full-rank layer patch, no extra decomposition); ``unrotated`` is the rotary channel with R(−p) applied to
every token's row (:func:`unrotate`), the keys before RoPE, where a direction means the same thing whatever
position an item's B sits at (one extra SVD per layer of the rotary channel). A content channel is never rotated,
so it is recorded once, in the native frame (``rotary`` 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kamera.core.rope import RotarySpec
from kamera.knobs import check_int
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.base import Adapter
    from kamera.models.flops import Forward, ItemShape

FRAMES = ("native", "unrotated")


def pair_rows(adapter: Adapter, spec: RotarySpec) -> torch.Tensor:
    """Per rotary pair, the row of the item's positions ([P, n]) it turns by: 0 for 1-D RoPE; on M-RoPE the t / h / w
    row (sections from the model's ``rope_parameters.mrope_section``, contiguous as Qwen2.5-VL applies them, or
    interleaved 1::3 / 2::3 as Qwen3-VL does). ValueError when the sections do not cover the pairs."""
    pairs = spec.rotary_dim // 2
    if adapter.position_rows == 1:
        return torch.zeros(pairs, dtype=torch.long)
    params = dict(getattr(adapter.text_config, "rope_parameters", None) or {})
    section = [int(x) for x in params.get("mrope_section") or []]
    if len(section) != 3 or sum(section) != pairs:
        raise ValueError(f"M-RoPE sections {section} do not cover the {pairs} rotary pairs")
    if params.get("mrope_interleaved") or params.get("interleaved"):
        rows = torch.zeros(pairs, dtype=torch.long)
        for row in (1, 2):
            rows[row: 3 * section[row]: 3] = row
        return rows
    return torch.repeat_interleave(torch.arange(3), torch.tensor(section))


def turn_tokens(x: torch.Tensor, positions: torch.Tensor, spec: RotarySpec, rows: torch.Tensor,
                sign: int) -> torch.Tensor:
    """R(sign·p_t) applied to each token t's row of ``x`` [n, heads, dim] (float64 angles, x's dtype out)."""
    pos = positions.reshape(-1, positions.shape[-1]).double().cpu()  # [P, n]
    angle = sign * pos[rows].T * spec.inv_freq.detach().double().cpu()  # [n, pairs]
    cos, sin = (f(angle).to(x.device, torch.float64)[:, None, :] for f in (torch.cos, torch.sin))
    d, out = spec.rotary_dim, x.double().clone()
    if spec.layout == "half":
        x1, x2 = out[..., : d // 2].clone(), out[..., d // 2: d].clone()
        out[..., : d // 2], out[..., d // 2: d] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    else:
        x1, x2 = out[..., 0:d:2].clone(), out[..., 1:d:2].clone()
        out[..., 0:d:2], out[..., 1:d:2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return out.to(x.dtype)


def unrotate(x: torch.Tensor, positions: torch.Tensor, spec: RotarySpec, rows: torch.Tensor) -> torch.Tensor:
    """R(−p_t)·x_t per token: a rotary channel's rows [n, heads, dim] taken back to position 0 (the keys before
    RoPE); :func:`turn_tokens` with sign +1 is its inverse."""
    return turn_tokens(x, positions, spec, rows, -1)


def top_directions(matrix: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """σ [k] and Vᵀ [k, width] of ``matrix`` (float64 SVD), k clamped to its rank bound."""
    _, s, vt = torch.linalg.svd(matrix.double(), full_matrices=False)
    k = min(k, int(s.numel()))
    return s[:k], vt[:k]


def record(layer: int, channel: str, frame: str, rotary: bool, s: torch.Tensor, vt: torch.Tensor,
           energy: float) -> dict:
    """One layer-channel's record in one frame (σ and Vᵀ rows rounded as JSON lists)."""
    return {"layer": layer, "channel": channel, "key_frame": frame, "rotary": int(rotary), "width": int(vt.shape[1]),
            "k": int(s.numel()), "energy": energy, "s": json.dumps([float(f"{float(x):.7g}") for x in s]),
            "v": json.dumps([[round(float(x), 6) for x in row] for row in vt.float()])}


@register
@dataclass
class DeficitBasisProbe(Probe):
    """``k``: the singular directions kept per layer-channel (the largest rank the basis can be read at)."""

    name = "deficit_basis"
    version = 2  # v2: the rotary channel also in the unrotated frame; records carry key_frame and rotary
    needs = frozenset({"patch"})
    k: int = 16

    def __post_init__(self) -> None:
        check_int("deficit_basis", "k", self.k, 1)

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`): none."""
        return []

    def run(self, ctx: ReuseContext) -> list[dict]:
        patch, delta, out = ctx.patch, ctx.deficit, []
        for layer, chans in enumerate(patch.factors):
            for c, (spec, blocks) in enumerate(zip(patch.specs, chans, strict=True)):
                b, rotary = blocks[0], spec.rotary_at(layer)
                k = min(self.k, b.full_rank)
                energy = float((b.s.double() ** 2).sum())
                out.append(record(layer, spec.name, "native", rotary is not None, b.s[:k], b.vt[:k], energy))
                if rotary is not None:
                    free = unrotate(delta.layers[layer][c], delta.positions, rotary, pair_rows(ctx.adapter, rotary))
                    s, vt = top_directions(free.reshape(free.shape[0], -1), self.k)
                    out.append(record(layer, spec.name, "unrotated", True, s, vt, float(free.double().norm() ** 2)))
        return out
