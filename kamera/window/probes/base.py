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

import dataclasses
import json
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch

from kamera.core import Patch
from kamera.metrics import eta, flipped, kl, recovered
from kamera.models.base import Adapter
from kamera.window.context import WindowContext, WindowView

PROBES: dict[str, type[Probe]] = {}


class UnknownProbeError(ValueError):
    """A probe name no module registered."""


class ProbeRefusal(ValueError):
    """A probe cannot run on this item (too short a history, no foreign chunks …); the reason says why."""


@dataclass
class Probe:
    """Base class; subclasses are dataclasses whose fields are the probe's knobs."""

    name: ClassVar[str] = ""

    def run(self, wctx: WindowContext) -> list[dict]:
        raise NotImplementedError

    def refuses(self, adapter: Adapter) -> str | None:
        """Why this probe cannot serve ``adapter``'s family, or None if it can."""
        return None

    def params(self) -> dict:
        """The knobs as row columns."""
        return dataclasses.asdict(self)

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
        the patch it applied (fills ``rank`` / ``effective_rank``); ``paid`` / ``stored``: the resources (see
        :meth:`WindowContext.resource`) whose forwards the variant pays at the operation / reads from stored
        state; ``measures`` are extra columns."""
        if bytes is None:
            if patch is None:
                raise ValueError(f"{self.name}: row {variant!r} needs its bytes or its patch")
            bytes = patch.nbytes()
        wctx = view.wctx
        ref, blind = view.reprefill_logits, view.blind.logits
        k, k_blind = kl(ref, logits), kl(ref, blind)
        gold = wctx.item.answer(view.layout.window)
        pred = wctx.answer_text(logits)
        paid_c, stored_c = wctx.cost(paid), wctx.cost(stored)
        page = view.page_bytes()
        return {
            "probe": self.name, "variant": variant, "item_id": wctx.item.item_id, "setting": setting,
            "window": json.dumps(view.layout.window), "n_b": view.n_b, "delta": view.delta,
            "kl": k, "kl_blind": k_blind, "eta": eta(k, k_blind, wctx.eta_floor),
            "flip": flipped(blind, ref, wctx.choice_ids), "recovered": recovered(logits, ref, wctx.choice_ids),
            "pred": pred, "ref_pred": wctx.answer_text(ref), "gold": gold,
            "correct": math.nan if gold is None else float(pred == gold),
            "bytes": int(bytes), "bytes_frac": bytes / page,
            "rank": math.nan if patch is None or patch.rank is None else float(patch.rank),
            "effective_rank": math.nan if patch is None else float(patch.effective_rank),
            "forwards": sum(paid_c.values()), "stored_forwards": sum(stored_c.values()),
            "forward_tags": json.dumps(dict(sorted(paid_c.items()))),
            "params": json.dumps(self.params(), sort_keys=True, default=str),
            **measures,
        }

    def reference_rows(self, view: WindowView, setting: str = "", **measures) -> list[dict]:
        """The two rows every setting carries: ``reprefill`` (the ceiling, one forward, the whole page
        recomputed) and ``blind`` (R(δ)·KV(target|∅), nothing paid at the operation)."""
        return [
            self.row(view, "reprefill", view.reprefill_logits, bytes=view.page_bytes(), paid=[view.full_key],
                     setting=setting, **measures),
            self.row(view, "blind", view.blind.logits, bytes=0, stored=[view.canonical_key], setting=setting, **measures),
        ]


def register(cls: type[Probe]) -> type[Probe]:
    """Class decorator: make a probe available by its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a non-empty name")
    if PROBES.get(cls.name, cls) is not cls:
        raise ValueError(f"probe name {cls.name!r} registered twice ({PROBES[cls.name].__name__}, {cls.__name__})")
    PROBES[cls.name] = cls
    return cls


def make_probe(name: str, **knobs) -> Probe:
    """Build a registered probe from its name and knobs (unknown names or knobs list the valid ones)."""
    if name not in PROBES:
        raise UnknownProbeError(f"unknown probe {name!r}; registered probes: {', '.join(sorted(PROBES))}")
    fields = {f.name for f in dataclasses.fields(PROBES[name])}
    bad = sorted(set(knobs) - fields)
    if bad:
        raise ValueError(f"probe {name!r} has no knob(s) {bad}; its knobs are {sorted(fields)}")
    return PROBES[name](**knobs)


def check_rank(probe: str, rank: int | None) -> None:
    """A patch rank knob: a non-negative int, or None for full rank."""
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
        raise ValueError(f"{probe}: rank must be a non-negative int or None (full rank), got {rank!r}")


def check_int(probe: str, knob: str, value, low: int) -> None:
    """An integer knob of at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{probe}: {knob} must be an int ≥ {low}, got {value!r}")
