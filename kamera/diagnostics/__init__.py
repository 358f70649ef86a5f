"""Measurements behind the paper's diagnostic, cost and fidelity figures (Figs. 3, 4, 8, 11, 12).

One small module per figure's quantity; each function takes an item's shared forwards
(:class:`~kamera.reuse.context.ReuseContext`), an adapter, or stored rows, and returns plain long-format
records (lists of dicts with a fixed key set per function), so a probe can store them beside the
rows and a renderer can pivot them. ``docs/diagnostics.md`` lists every record schema.

    energy.energy_curve           Fig. 3(a)  energy captured per layer vs patch rank m
    deficit_norm.deficit_norms    Fig. 3(b)  ‖Δ‖_F / ‖KV‖_F per layer: raw, conditioning, position
    landmarks.landmark_keys       Fig. 3(c)  A's keys holding 90% of B's attention on A, per layer
    selectors.selector_recall     Fig. 4(a)  recall of the true top-50% ‖Δ‖ tokens by cheap selectors
    video.token_signals           Fig. 4(b)  per-token ‖Δ‖ beside optical-flow motion, warp residual,
    records.signal_spearman                  frame similarity, vision-embedding difference; Spearman ρ
    planes.depth_planes           Fig. 8     |Δ| pooled to a token × feature grid per layer
    ttft.ttft                     Fig. 11(b) TTFT recompute vs reuse (``python -m kamera.diagnostics.ttft``;
                                             not imported here)
    records.cumulative            Fig. 11(c) cumulative time after N reuses, break-even N

``records`` holds the summaries the renderers read (pure functions of stored records, no forward).
    fidelity.kl_by_arm            Fig. 12(a) KL of unrotated / blind / patch arms, from rows
    relocation.relocation_error   Fig. 12(b) relocated vs prefilled keys over distance, per RoPE scheme
    fidelity.mc_agreement         Fig. 12(c) MC accuracy and per-item agreement with re-prefill, from rows
"""

from kamera.diagnostics.deficit_norm import deficit_norms
from kamera.diagnostics.energy import energy_curve
from kamera.diagnostics.fidelity import kl_by_arm, mc_agreement
from kamera.diagnostics.landmarks import landmark_keys
from kamera.diagnostics.planes import depth_planes
from kamera.diagnostics.records import signal_spearman
from kamera.diagnostics.relocation import relocation_error
from kamera.diagnostics.selectors import selector_recall
from kamera.diagnostics.video import token_signals

__all__ = [
    "deficit_norms",
    "depth_planes",
    "energy_curve",
    "kl_by_arm",
    "landmark_keys",
    "mc_agreement",
    "relocation_error",
    "selector_recall",
    "signal_spearman",
    "token_signals",
]
