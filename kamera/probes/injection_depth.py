"""Per injection layer ℓ: the share of the final layer's conditioning deficit that injecting B's conditioned
hidden state at ℓ explains (Fig. 6b, "wrong depth").

Paper (§4 "Deep"): "A single-layer injection explains ≈ 27% of the final deficit applied shallow but
≈ 97% applied deep, with no shallow shortcut"; Fig. 6(b) plots "% of final-layer deficit explained"
against "injection depth (layer / total)". The paper does not spell the injection out; our reading:

- *inject at ℓ*: B's rows enter layer ℓ with the hidden state they have there in the conditioned
  forward [prefix · A · B] and run layers ℓ … L−1 in a context without A: the prefix as the full
  prefill left it, B at its native positions, B ↛ A (the 4D-mask oracle's context). Layers below ℓ
  are not run for B (a layer's K/V depend only on the hidden state entering it).
- *the final-layer deficit* is D = KV_{L−1}(B|A) − KV_{L−1}(inject at 0): the conditioned KV minus B's
  KV when nothing is injected, i.e. the oracle's B, so no position term enters it.
- *explained(ℓ)* = 1 − ‖KV_{L−1}(inject at ℓ) − KV_{L−1}(B|A)‖² / ‖D‖², the squared norms summed over
  the final layer's channels (an energy share, like Δ's other shares). explained(0) = 0 and
  explained(L−1) = 1 by construction; NaN where D = 0.

KV(B|A) and the hidden states entering each layer come from one replay of B's rows on the full
prefill's context (:class:`~kamera.reuse.recompute.LayerDriver`, tag ``probe_conditioned``), which
reproduces the full prefill's K/V to float rounding; the injections run on one driver over
[prefix · B] (tag ``probe_injection``). Cost: Σ_ℓ (L − ℓ) layer passes of B's rows.
Knob: ``layers`` ("all", or the injection layers to measure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import LayerDriver, shared

if TYPE_CHECKING:
    from kamera.models.flops import Forward, ItemShape


def conditioned_hidden(ctx: ReuseContext) -> tuple[list[torch.Tensor], tuple[torch.Tensor, ...]]:
    """B's hidden states entering each layer of the conditioned forward ([n_B, H] each, layers 0 … L−1)
    and B's final-layer KV as that replay wrote it (cached per context)."""

    def make():
        spans = ctx.enc.spans[: ctx.b + 1]
        driver = LayerDriver(ctx.adapter, spans, [*ctx.context_kv, ctx.conditioned], "probe_conditioned")
        rows = torch.arange(driver.n_tokens - ctx.n_b, driver.n_tokens, device=ctx.adapter.device)
        hidden = [spans[-1].embeds]
        for layer in range(driver.n_layers - 1):
            hidden.append(driver.run(layer, rows, hidden[-1]))
        final = driver.n_layers - 1
        driver.run(final, rows, hidden[-1])
        driver.finish()
        return hidden, tuple(t.clone() for t in driver.layer_rows(final, rows))

    return shared(ctx, "conditioned_hidden", make)


def _energy(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> float:
    return float(sum((x.double() - y.double()).pow(2).sum() for x, y in zip(a, b, strict=True)))


@register
@dataclass
class InjectionDepthProbe(Probe):
    name = "injection_depth"
    needs = frozenset({"full", "conditioned"})
    drives_layers = True
    layers: str | list[int] = "all"

    def __post_init__(self) -> None:
        if isinstance(self.layers, str):
            if self.layers != "all":
                raise ValueError(
                    f"injection_depth layers must be 'all' or a list of layer indices, got {self.layers!r}"
                )
        elif not self.layers or not all(isinstance(l, int) and not isinstance(l, bool) and l >= 0 for l in self.layers):
            raise ValueError(f"injection_depth layers must be non-negative ints, got {self.layers!r}")

    def problems(self, device: str = "cpu", n_layers: int | None = None) -> list[str]:
        """Layer indices beyond the model's depth, known from its config before load."""
        bad = [] if n_layers is None or isinstance(self.layers, str) else [l for l in self.layers if l >= n_layers]
        return (
            [f"injection_depth layers {bad} are beyond the model's {n_layers} layers (0..{n_layers - 1})"]
            if bad
            else []
        )

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). One replay of
        B's rows over the full prefill's context, then Σ_ℓ (L − ℓ) / L passes of B over [prefix · B] for ℓ = 0 and
        each measured layer."""
        chosen = range(n_layers) if self.layers == "all" else {0, *self.layers}
        return [shape.b_in_context(), shape.solo(sum(n_layers - l for l in chosen if l < n_layers) / n_layers)]

    def run(self, ctx: ReuseContext) -> list[dict]:
        n_layers = ctx.adapter.n_layers
        chosen = range(n_layers) if self.layers == "all" else sorted(set(self.layers))
        if max(chosen) >= n_layers:
            raise ValueError(f"injection_depth layers {list(chosen)} out of range for a {n_layers}-layer model")
        hidden, target = conditioned_hidden(ctx)
        context = [0] if ctx.has_prefix else []
        spans = [*(ctx.enc.spans[i] for i in context), ctx.enc.spans[ctx.b]]
        driver = LayerDriver(
            ctx.adapter, spans, [*(ctx.context_kv[i] for i in context), ctx.conditioned], "probe_injection"
        )
        rows = torch.arange(driver.n_tokens - ctx.n_b, driver.n_tokens, device=ctx.adapter.device)

        def final_kv(start: int) -> tuple[torch.Tensor, ...]:
            h = hidden[start]
            for layer in range(start, n_layers):
                h = driver.run(layer, rows, h)
            driver.finish()
            return tuple(t.clone() for t in driver.layer_rows(n_layers - 1, rows))

        deficit = _energy(target, final_kv(0))
        records = []
        for layer in chosen:
            residual = _energy(target, final_kv(layer)) if layer else deficit
            records.append(
                {
                    "layer": layer,
                    "n_layers": n_layers,
                    "depth": layer / n_layers,
                    "residual": residual,
                    "deficit": deficit,
                    "explained": 1.0 - residual / deficit if deficit > 0 else float("nan"),
                }
            )
        return records
