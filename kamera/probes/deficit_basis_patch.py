"""The η of a basis patch (App. C.2, §4): Δ projected on a pooled per-layer-channel basis, applied, the query run on it.

``make basis`` runs in two passes: the ``deficit_basis`` records of every item, then ``python -m experiments.basis
--fit`` writes each model's pooled bases W (top eigenvectors of Σ_train V diag(s²) Vᵀ per layer-channel and frame,
fit on the training half of the items' clusters) to an ``.npz``, and this probe reads it (``fit``). Per item, rank r
and frame (:data:`~kamera.probes.deficit_basis.FRAMES`), the basis patch is Δ W_r W_rᵀ per layer-channel, its
coefficients Δ W_r from the item itself; in the ``unrotated`` frame the rotary channel is projected as R(−p)Δ and
turned back by R(p) per token. Beside it, the item's own rank-r SVD patch (the arms' rank-r patch, both channels at
rank r) and blind reuse; records carry the KLs to re-prefill, and
the renderer forms η = 1 − KL / KL_blind over the held-out items.

``fit: own`` needs no file: the basis is the item's own top-r directions, so the basis patch is the own patch (a
check of the projection path, and the plugin's golden entry).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from kamera.knobs import check_counts
from kamera.metrics import kl
from kamera.probes.base import Probe, register
from kamera.probes.deficit_basis import FRAMES, pair_rows, top_directions, turn_tokens, unrotate
from kamera.reuse.context import ReuseContext

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


def basis_key(layer: int, channel: str, frame: str) -> str:
    """A basis's name in the fit file."""
    return f"{layer}/{channel}/{frame}"


def frame_matrix(ctx: ReuseContext, layer: int, c: int, frame: str) -> torch.Tensor:
    """Δ of one layer-channel as an n × width float64 matrix in ``frame`` (a content channel is the same in both)."""
    spec, t = ctx.deficit.specs[c], ctx.deficit.layers[layer][c]
    rotary = spec.rotary_at(layer)
    if frame == "unrotated" and rotary is not None:
        t = unrotate(t.double(), ctx.deficit.positions, rotary, pair_rows(ctx.adapter, rotary))
    return t.reshape(t.shape[0], -1).double()


@register
@dataclass
class DeficitBasisPatchProbe(Probe):
    """``fit``: the fit file ``experiments.basis --fit`` wrote for this model (or ``own``); ``ranks``: the r read.
    The fit enters the records' knobs as its sha256, not its path, so a refit is a new measurement."""

    name = "deficit_basis_patch"
    needs = frozenset({"patch", "blind"})
    fit: str = "own"
    ranks: list[int] = field(default_factory=lambda: [4, 16])

    def __post_init__(self) -> None:
        self.ranks = check_counts("deficit_basis_patch", "ranks", self.ranks)
        if self.fit != "own":
            if not Path(self.fit).is_file():
                raise ValueError(f"deficit_basis_patch: fit file {self.fit} does not exist (make basis-fit writes it: "
                                 "python -m experiments.basis --fit experiment=<basis experiment>)")
            widest = min(int(w.shape[1]) for w in self.bases.values())
            if max(self.ranks) > widest:
                raise ValueError(
                    f"deficit_basis_patch: ranks {self.ranks} exceed the {widest} directions of {self.fit}"
                )

    @cached_property
    def bases(self) -> dict[str, np.ndarray]:
        with np.load(self.fit, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}

    def params(self) -> dict:
        """The knobs, with the fit file named by its content (sha256) rather than its path."""
        digest = "own" if self.fit == "own" else "sha256:" + hashlib.sha256(Path(self.fit).read_bytes()).hexdigest()
        return {"fit": digest, "ranks": list(self.ranks)}

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`): per rank and frame
        a query over the own rank-r patch and one per frame over the basis patch."""
        return [shape.query_over((1 + len(FRAMES)) * len(self.ranks))]

    def basis(self, deficit: dict, key: tuple[int, int, str], name: str, r: int) -> torch.Tensor:
        """W_r [width, r] for one layer-channel in a frame: the fit's, or (``own``) the item's own top-r."""
        if self.fit == "own":
            return deficit[key][1][:r].T
        layer, _, frame = key
        if (found := self.bases.get(basis_key(layer, name, frame))) is None:
            raise ValueError(
                f"deficit_basis_patch: {self.fit} has no basis {basis_key(layer, name, frame)} (fit on another model?)"
            )
        return torch.from_numpy(found[:, :r])

    def patched(self, ctx: ReuseContext, deficit: dict, frame: str, r: int, own: bool) -> torch.Tensor:
        """The query's logits with B = R(δ)·KV(B|∅) + Δ W_r W_rᵀ per layer-channel (W the own or the pooled basis);
        ``deficit`` maps (layer, channel, frame) to Δ in that frame and its own right singular vectors."""
        base, layers = ctx.relocated, []
        for layer, chans in enumerate(base.layers):
            new = []
            for c, (t, spec) in enumerate(zip(chans, base.specs, strict=True)):
                d, vt = deficit[(layer, c, frame)]
                w = vt[:r].T if own else self.basis(deficit, (layer, c, frame), spec.name, r).to(d)
                p = (d @ w @ w.T).reshape(t.shape)
                rotary = spec.rotary_at(layer)
                if frame == "unrotated" and rotary is not None:
                    p = turn_tokens(p, base.positions, rotary, pair_rows(ctx.adapter, rotary), 1)
                new.append((t.double() + p).to(t.dtype))
            layers.append(tuple(new))
        return ctx.query(base.with_layers(layers), tag="probe_basis_patch").logits

    def run(self, ctx: ReuseContext) -> list[dict]:
        deficit = {}
        for layer, chans in enumerate(ctx.deficit.layers):
            for c in range(len(chans)):
                for frame in FRAMES:
                    d = frame_matrix(ctx, layer, c, frame)
                    deficit[(layer, c, frame)] = (d, top_directions(d, max(self.ranks))[1])
        blind = kl(ctx.reprefill_logits, ctx.blind.logits, what="re-prefill ‖ blind")
        out = []
        for r in self.ranks:
            own = kl(
                ctx.reprefill_logits,
                self.patched(ctx, deficit, "native", r, True),
                what=f"re-prefill ‖ own rank-{r} patch",
            )
            out.extend(
                {
                    "r": r,
                    "key_frame": frame,
                    "kl_blind": blind,
                    "kl_own": own,
                    "kl_basis": kl(
                        ctx.reprefill_logits,
                        self.patched(ctx, deficit, frame, r, False),
                        what=f"re-prefill ‖ basis rank-{r} patch ({frame})",
                    ),
                }
                for frame in FRAMES
            )
        return out
