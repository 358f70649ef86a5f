"""Survivor: evict the leading chunk; what does a chunk that stays need? (§5 "Sliding-window survival", Table 1, App. B)

Source: §5 "We evict the leading chunk and ask what the survivors need ... Keeping a survivor's
conditioned KV as-is and applying R(δ) is near-lossless on GQA and MLA ... the removal deficit is the
low-rank deep dual of the addition deficit (deep rel-norm ≈ 3× shallow; 90%-energy rank 36–44), so a
rank-64 removal patch recovers it"; App. B "measures the surviving interior chunk under keep-as-is
(R(δ) only) versus a rank-r removal patch; Δ_remove relative norm is reported by depth, with the
90%-energy rank".

The window is history chunks 0 … k−1 (k = the item's window); the survivor S sits at window slot
``survivor`` (default −2: the last-but-one chunk, interior for k ≥ 3). The slide evicts chunk 0 and
admits chunk k behind the window: before ``[0 … k−1]``, after ``[1 … k]``. Variants (reference: the
re-prefill of the slid window):

- ``keep_as_is``: S's KV from the window before the slide, relocated by R(δ) only (δ = −extent of the
  evicted chunk): nothing paid.
- ``removal_patch``: keep-as-is + the top-r SVD of Δ_remove = KV(S | slid window) − R(δ)·KV(S | window
  with the evicted chunk). Forming it needs one forward over the slid window (counted as paid).
- ``reprefill`` and ``blind`` (R(δ)·KV(S|∅)) as everywhere.

Extra columns: ``kl_keep`` and ``eta_keep`` = 1 − KL/KL_keep (the share of the keep-as-is gap a variant
closes; the paper's removal-patch η is read as this one: "a rank-64 removal patch recovers it"), and,
per layer and channel, ``removal_rel_norm`` = ‖Δ_remove‖_F / ‖KV(S | slid window)‖_F and
``removal_e90`` (directions holding ``energy`` of ‖Δ_remove‖², :func:`kamera.metrics.energy_rank`), as JSON
lists [layer][channel]. A layer-channel whose relative norm is at or below the cache dtype's rounding floor
(:func:`kamera.metrics.rounding_floor`: 4·eps(dtype), plus eps(float32)·max|position| on a rotary channel, the
rule ``e90_columns`` applies to Δ) reports e90 = 0: its Δ_remove is rounding, whose "rank" is noise's (about
n_B / 2, spread over every direction), not the removal deficit's. The floor is relative to the norm and scales
with the dtype: a fixed cut (the former 1e-5) sits below bf16's own rounding (≈ 4e-3 relative at layer 0, eps
7.8e-3), so in bf16 every layer counted as a deficit, and it was 20× above float32's (≈ 3e-7). 4 eps covers the
two roundings of one tensor (kept-as-is and re-prefilled, ≤ eps/2 per entry each) with margin; the measured
rounding in bf16 stays below 1e-2 on every layer of the tiny families while a real removal deficit is ≥ 0.2.

``mask_evicted``: the window before the slide is prefilled under a 4D mask that keeps every later token
from attending the evicted chunk (a constructed window whose leading chunk left no influence); with no
prefix, keep-as-is then equals the re-prefill of the slid window up to float rounding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kamera.core import Patch, deficit
from kamera.knobs import check_rank
from kamera.metrics import energy_rank, eta, kl, rounding_floor
from kamera.window.context import WindowContext
from kamera.window.ops import Layout, slide
from kamera.window.probes.base import ProbeRefusal, WindowProbe, register

if TYPE_CHECKING:
    from kamera.models.flops import Forward, WindowShape

@register
@dataclass
class SurvivorProbe(WindowProbe):
    name = "survivor"
    stream = "survivor"
    survivor: int = -2
    rank: int | None = 64
    energy: float = 0.9
    mask_evicted: bool = False

    def __post_init__(self) -> None:
        check_rank(self.name, self.rank)
        if isinstance(self.survivor, bool) or not isinstance(self.survivor, int):
            raise ValueError(f"{self.name}: survivor must be a window slot (an int; negative counts from the end)")
        if not 0 < self.energy <= 1:
            raise ValueError(f"{self.name}: energy must be in (0, 1], got {self.energy}")
        if not isinstance(self.mask_evicted, bool):
            raise ValueError(f"{self.name}: mask_evicted must be a bool, got {self.mask_evicted!r}")

    def slot(self, k: int) -> int:
        """The survivor's window slot (0-based) in a window of k; the evicted slot 0 is refused."""
        s = self.survivor % k if -k <= self.survivor < k else None
        if s is None or s == 0:
            raise ProbeRefusal(
                f"{self.name}: survivor slot {self.survivor} is not a surviving chunk of a {k}-chunk window"
            )
        return s

    def cost_forwards(self, shape: WindowShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). The window
        before and after the slide (k chunks each), blind, keep-as-is and removal-patch queries."""
        return [shape.layout(shape.window, 2), shape.query_over(shape.window, 3), shape.canonical()]

    def run(self, wctx: WindowContext) -> list[dict]:
        k = wctx.item.window
        self.need(wctx, k + 1)
        s = self.slot(k)
        window = Layout(tuple(range(s)), s, tuple(range(s + 1, k)))
        before = wctx.view(Layout(window.before, s, window.after, masked=(0,) if self.mask_evicted else ()))
        view = wctx.view(slide(window, admit=k))
        kept = view.carry(before.conditioned)
        removal = deficit(view.conditioned, kept)
        patch = Patch.form(removal, dtype=wctx.adapter.dtype)
        removal_m = self.at_rank(patch, wctx)
        keep_logits = view.query(kept, tag="keep_as_is").logits
        removal_logits = view.query(removal_m.apply(kept), tag="removal_patch").logits
        kl_keep = kl(view.reprefill_logits, keep_logits)
        rel = [
            [float(d.norm() / c.float().norm().clamp_min(1e-30)) for d, c in zip(dl, cl, strict=True)]
            for dl, cl in zip(removal.layers, view.conditioned.layers, strict=True)
        ]
        floor = [rounding_floor(view.conditioned, c) for c in range(len(patch.specs))]
        e90 = [  # the rank of rounding noise (a layer the context cannot reach, e.g. layer 0) is reported as 0
            [energy_rank(blocks[0].s, self.energy) if rel[l][c] > floor[c] else 0 for c, blocks in enumerate(chans)]
            for l, chans in enumerate(patch.factors)
        ]
        measures = {
            "setting": f"survivor={s}",
            "survivor_slot": s,
            "kl_keep": kl_keep,
            "removal_rel_norm": json.dumps(rel),
            "removal_e90": json.dumps(e90),
        }
        rows = [
            *self.reference_rows(view, **measures),
            self.row(view, "keep_as_is", keep_logits, bytes=0, stored=[before.full_key], **measures),
            self.row(
                view,
                "removal_patch",
                removal_logits,
                patch=removal_m,
                paid=[view.full_key],
                stored=[before.full_key],
                **measures,
            ),
        ]
        for r in rows:
            r["eta_keep"] = eta(r["kl"], kl_keep, wctx.eta_floor)
        return rows
