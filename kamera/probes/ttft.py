"""Time to first token, recompute vs reuse, over segment lengths, on the job's model (Fig. 11b, c).

A per-*model* probe: it does not read the item it runs on. On the job's model it builds one timing
item per segment length (:func:`kamera.diagnostics.ttft.segment_spans`: a prefix, A = one frame, B =
frames totalling about ``n`` visual tokens, a one-line query) and times vision encoder, prefill,
forming and relocate + patch apply (:func:`kamera.diagnostics.ttft.ttft`; medians of ``repeats``
after a warm-up, CUDA events on a GPU, ``perf_counter`` on CPU). The records are stored with the
item the probe ran on, so a TTFT job selects one item (``n_items: 1``); with more items each is one
more independent measurement and a renderer takes the median over them.

Timings depend on the device, which is not part of a job's identity, so the device is a knob:
``device: cpu`` records are keyed apart from ``device: cuda`` ones (a GPU run of a job first timed
on CPU times again instead of finding it complete), and the probe refuses to time on another device
than its knob names. The records' ``dtype`` key is dropped (the job's ``dtype`` key says it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kamera.diagnostics.ttft import RANKS, SIZES, ttft
from kamera.knobs import check_counts
from kamera.models.flops import Forward, ItemShape
from kamera.probes.base import Probe, register
from kamera.reuse.context import ReuseContext

DEVICES = ("cpu", "cuda")


@register
@dataclass
class TtftProbe(Probe):
    """``sizes``: segment lengths in visual tokens; ``ranks``: patch ranks m timed; ``repeats``: timed calls
    per measurement (median); ``frame_px``: frame side; ``device``: "cpu" or "cuda", the job's device type."""

    name = "ttft"
    needs = frozenset()
    sizes: list[int] = field(default_factory=lambda: list(SIZES))
    ranks: list[int] = field(default_factory=lambda: list(RANKS))
    repeats: int = 3
    frame_px: int = 448
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.sizes = check_counts("ttft", "sizes", self.sizes)
        self.ranks = check_counts("ttft", "ranks", self.ranks)
        check_counts("ttft", "repeats / frame_px", [self.repeats, self.frame_px])
        if self.device not in DEVICES:
            raise ValueError(f"ttft device must be one of {DEVICES}, got {self.device!r}")

    def cost_forwards(self, shape: ItemShape, n_layers: int) -> list[Forward]:
        """The forwards this probe runs per item beyond the shared ones (:mod:`kamera.sweep.cost`). Per segment
        length s, a timing item [prefix · one frame · s · query] (a frame of ``frame_px``² pixels taken as (frame_px
        / 28)² tokens, Qwen's merged 28-pixel patches): its full, conditioned and canonical prefills, then 1 +
        ``repeats`` timed calls (a warm-up) of the in-context prefill, the canonical and the conditioned forward (the
        full item's shape, less its query) and per rank of the reuse query."""
        frame, out = (self.frame_px // 28) ** 2, []
        for s in self.sizes:
            item = ItemShape(n=shape.prefix + frame + s + shape.query, n_b=s, prefix=shape.prefix, query=shape.query)
            calls = 1 + self.repeats
            prefill = Forward(s + shape.query, shape.prefix + frame + s / 2, calls)  # [B · query] on the context
            out += [item.full(2 + calls), item.solo(1 + calls), prefill, item.query_over(calls * len(self.ranks))]
        return out

    def problems(self, device: str = "cpu", n_layers: int | None = None) -> list[str]:
        """The probe times on the device its knob names: a job on another device is refused in preflight."""
        if device == self.device:
            return []
        return [f"the ttft probe is set to time on {self.device} but the job runs on {device}: set "
                f"device={self.device} for the job, or the probe's device knob to {device}"]

    def run(self, ctx: ReuseContext) -> list[dict]:
        if why := self.problems(ctx.adapter.device.type):
            raise ValueError(why[0])
        records = ttft(ctx.adapter, self.sizes, self.ranks, self.repeats, self.frame_px)
        return [{k: v for k, v in r.items() if k != "dtype"} for r in records]
