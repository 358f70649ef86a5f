"""The probe interface: one small dataclass per window experiment, its knobs as fields.

A probe runs on one window item's shared context (:class:`~kamera.window.context.WindowContext`) and
returns one row per (setting, variant): a turnover τ, an ordering or a perturbation, and the way the
target's KV was built (``reprefill``, ``blind``, ``stale_patch`` …). Rows carry the columns of arm
rows (kl, kl_blind, eta, flip, recovered, pred, gold, correct, bytes, bytes_frac) plus ``forwards``
(the forwards the variant pays at the operation, measured), ``stored_forwards`` (those behind the
stored state it reads: canonicals, patches formed earlier) and probe-specific measures. Within one
item, (probe, setting, variant) names a row uniquely: it is the row's key beside the item's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch

from kamera.core import Patch, family_rank_view
from kamera.metrics import eta, flipped, kl, recovered
from kamera.reuse.plugin import Plugin, Registry, UnknownNameError
from kamera.window.context import WindowContext, WindowView


class UnknownProbeError(UnknownNameError):
    """A window probe name no module registered."""


class ProbeRefusal(ValueError):
    """A probe cannot run on this item (too short a history, no foreign chunks …); the reason says why."""


@dataclass
class WindowProbe(Plugin):
    """Base class; subclasses are dataclasses whose fields are the probe's knobs (a :class:`~kamera.reuse.plugin.
    Plugin` of the ``window probe`` registry: it reads no :data:`~kamera.reuse.plugin.SHARED` quantity, its
    item's shared forwards live on the :class:`WindowContext` instead). ``version`` is its code version, stamped on
    every row it makes (bump it when a change changes a stored number, as for arms)."""

    version: ClassVar[int] = 1
    # the kind of stream it reads (kamera/toy/window_task.py builds one per kind): the toy window benchmark serves a
    # probe only items of its stream (None: no stream is built for it)
    stream: ClassVar[str | None] = None

    def run(self, wctx: WindowContext) -> list[dict]:
        raise NotImplementedError

    def problems(self, window: int | None = None) -> list[str]:
        """What is wrong with this probe for a job, known before any weights load, one line each: ``window`` is the
        benchmark's window of k chunks (None where the options do not fix it)."""
        return []

    def at_rank(self, patch: Patch, wctx: WindowContext) -> Patch:
        """``patch`` at this probe's ``rank`` m and the family's rotary rank (⌈m/4⌉ on MLA's k_pe, m on GQA / MHA):
        :func:`kamera.core.family_rank_view`, the rule the patch arms use, so a window row's bytes and η are
        those of the arm's rank-m patch."""
        return family_rank_view(patch, self.rank, wctx.adapter.attention)

    def need(self, wctx: WindowContext, history: int, foreign: int = 0) -> None:
        """Refuse items with fewer than ``history`` history chunks or ``foreign`` foreign chunks."""
        item = wctx.item
        if item.n_history < history or len(item.foreign) < foreign:
            raise ProbeRefusal(
                f"{self.name}: needs ≥ {history} history and ≥ {foreign} foreign chunks; item {item.item_id} has "
                f"{item.n_history} and {len(item.foreign)}"
            )

    def row(self, view: WindowView, variant: str, logits: torch.Tensor, *, bytes: int | None = None,
            patch: Patch | None = None, paid: Iterable[Hashable] = (), stored: Iterable[Hashable] = (),
            setting: str = "", **measures) -> dict:
        """One row: ``variant``'s logits on ``view`` against the view's re-prefill (its reference) and blind reuse.

        ``bytes``: what the variant stores or recomputes for the target (default: ``patch``'s bytes); ``patch``:
        the patch it applied (fills ``rank`` / ``effective_rank`` / ``effective_rotary_rank``); ``paid`` /
        ``stored``: the resources (see :meth:`WindowContext.resource`) whose forwards the variant pays at the
        operation / reads from stored state; ``measures`` are extra columns."""
        if bytes is None:
            if patch is None:
                raise ValueError(f"{self.name}: row {variant!r} needs its bytes or its patch")
            bytes = patch.nbytes()
        wctx = view.wctx
        ref, blind = view.reprefill_logits, view.blind.logits
        what = f"re-prefill ‖ {self.name} {variant} ({setting}), window item {wctx.item.item_id}"
        k, k_blind = kl(ref, logits, what=what), kl(ref, blind, what=what.replace(variant, "blind", 1))
        gold = wctx.item.answer(view.layout.window)
        pred = wctx.answer_text(logits)
        paid_c, stored_c = wctx.cost(paid), wctx.cost(stored)
        page = view.page_bytes()
        return {
            "probe": self.name, "variant": variant, "item_id": wctx.item.item_id, "setting": setting,
            "window": json.dumps(view.layout.window), "n_b": view.n_b, "delta": view.delta,
            "kl": k, "kl_blind": k_blind, "eta": eta(k, k_blind, wctx.eta_floor, what=f"η of {what}"),
            "flip": flipped(blind, ref, wctx.choice_ids), "recovered": recovered(logits, ref, wctx.choice_ids),
            "pred": pred, "ref_pred": wctx.answer_text(ref), "gold": gold,
            "correct": math.nan if gold is None else float(pred == gold),
            "bytes": int(bytes), "bytes_frac": bytes / page,
            "rank": math.nan if patch is None or patch.rank is None else float(patch.rank),
            "effective_rank": math.nan if patch is None else float(patch.effective_rank),
            "effective_rotary_rank": math.nan if patch is None else float(patch.effective_rotary_rank),
            "patch_dtype": "" if patch is None else str(patch.dtype).removeprefix("torch."),
            "forwards": sum(paid_c.values()), "stored_forwards": sum(stored_c.values()),
            "forward_tags": json.dumps(dict(sorted(paid_c.items()))),
            "params": json.dumps(self.params(), sort_keys=True, default=str),
            **measures,
        }

    def reference_rows(self, view: WindowView, setting: str = "", **measures) -> list[dict]:
        """The two rows every setting carries: ``reprefill`` (the ceiling, one forward, the whole page
        recomputed) and ``blind`` (R(δ)·KV(target|∅), nothing paid at the operation)."""
        return [
            self.row(
                view,
                "reprefill",
                view.reprefill_logits,
                bytes=view.page_bytes(),
                paid=[view.full_key],
                setting=setting,
                **measures,
            ),
            self.row(
                view, "blind", view.blind.logits, bytes=0, stored=[view.canonical_key], setting=setting, **measures
            ),
        ]


WINDOW_PROBE_REGISTRY: Registry[WindowProbe] = Registry("window probe", UnknownProbeError)
PROBES = WINDOW_PROBE_REGISTRY.entries
register = WINDOW_PROBE_REGISTRY.register
make_probe = WINDOW_PROBE_REGISTRY.make
