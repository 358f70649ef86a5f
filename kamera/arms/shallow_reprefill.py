"""Shallow re-prefill: keep B's KV in the bottom ℓ layers, recompute all of B above them in context.

Source: the paper's partial-forward lever (App. C.3: "reusing the shallow layers and recomputing
only the deep, entangled ones in context"; Table 5 "shallow re-prefill (bottom 3 layers)", i.e.
ℓ = 3 layers kept; Table 8's "re-prefill fraction to match" sweeps the re-run fraction of layers).

Mechanism (:func:`kamera.reuse.recompute.reuse_bottom`): layers 0 … ℓ−1 keep R(δ)·KV(B|∅). A layer's K/V
depend only on the hidden state entering it, so to give layer ℓ conditioned K/V the forward resumes
one layer below: B's rows start from their hidden state entering layer ℓ−1 in the canonical
forward (what a deployment would store beside the canonical: ``residual_bytes``), run layer ℓ−1's
attention over the full context (its K/V are the reused ones and are kept), and continue through
layers ℓ … L−1 writing their K/V. ℓ = 0 re-prefills B (≡ the ceiling); ℓ = L is blind reuse; layer-0
K/V never see the context, so ℓ = 1 equals ℓ = 0 up to relocation rounding.

Knobs: ``reuse_layers`` ℓ (default 3), or ``rerun_fraction`` f ∈ [0, 1] (Table 8), which overrides
it with ℓ = L − round(f · L). Bytes: the recomputed K/V, (L − ℓ)/L of B's page; ``computed_fraction``
adds the lead-in layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, ArmRefusal, register
from kamera.arms.budget import cell_bytes
from kamera.knobs import check_count, check_fraction
from kamera.models.base import Adapter
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import reuse_bottom


@register
@dataclass
class ShallowReprefillArm(Arm):
    name = "shallow_reprefill"
    needs = frozenset({"full", "relocated"})
    drives_layers = True
    reuse_layers: int = 3
    rerun_fraction: float | None = None

    def __post_init__(self) -> None:
        check_count(self.name, "reuse_layers", self.reuse_layers)
        if self.rerun_fraction is not None:
            check_fraction(self.name, "rerun_fraction", self.rerun_fraction)

    def problems(self, device: str = "cpu", n_layers: int | None = None) -> list[str]:
        """A ``reuse_layers`` above the model's layer count is an error (in preflight where the count is known
        before load), not clamped."""
        if n_layers is not None and self.rerun_fraction is None and self.reuse_layers > n_layers:
            return [f"reuse_layers={self.reuse_layers} exceeds the model's {n_layers} layers"]
        return []

    def refuses(self, adapter: Adapter) -> str | None:
        """:meth:`problems` once the model is loaded (a model whose layer count preflight could not read), then the
        model's own refusals."""
        return next(iter(self.problems(n_layers=adapter.n_layers)), None) or super().refuses(adapter)

    def reused(self, n_layers: int) -> int:
        """ℓ for a model of n_layers (the runner has already set aside models this arm refuses)."""
        if self.rerun_fraction is not None:
            return n_layers - round(self.rerun_fraction * n_layers)
        return self.reuse_layers

    def run(self, ctx: ReuseContext) -> ArmOutput:
        n_layers, n_b = ctx.adapter.n_layers, ctx.n_b
        if why := self.refuses(ctx.adapter):
            raise ArmRefusal(why)
        ell = self.reused(n_layers)
        rec = reuse_bottom(ctx, ell)
        out = ctx.query(rec.kv, tag=self.name)
        hidden = ctx.enc.spans[ctx.b].embeds
        resumes_mid_stack = 2 <= ell < n_layers
        params = {
            **self.params(),
            "reused_layers": ell,
            "rerun_fraction_effective": (n_layers - ell) / n_layers,
            "n_recomputed": n_b if ell < n_layers else 0,
            "computed_fraction": rec.cells / (n_b * n_layers),
            "residual_bytes": n_b * hidden.shape[-1] * hidden.element_size() if resumes_mid_stack else 0,
        }
        return ArmOutput(out, rec.n_written_cells * cell_bytes(ctx), params, recomputed_tokens=rec.cells)
