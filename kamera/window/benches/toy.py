"""``window_toy``: the toy window task (:mod:`kamera.toy.window_task`) for ``toy_window``, one purpose-built stream
per kind (the benchmark's subsets), ``n_items`` items per kind. A probe runs only on the stream it reads
(:attr:`WindowProbe.stream <kamera.window.probes.base.WindowProbe.stream>`); the others are refused, with the
reason, per item."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from kamera.items.selection import Selection
from kamera.items.window import WindowEntry, WindowItem
from kamera.knobs import is_int
from kamera.models.base import Adapter
from kamera.toy.window_task import KINDS
from kamera.window.benches.base import Read, WindowBench
from kamera.window.probes import PROBES, WindowProbe


def default_states(kind: str) -> int | None:
    """K of the toy task's ``kind`` stream by default: the ``n_chunks`` default of the probe of that name (reorder,
    divergent, refresh); None for a stream of fixed length (3 states), whose probe has no such knob."""
    knob = {f.name: f for f in dataclasses.fields(PROBES[kind])}.get("n_chunks")
    return None if knob is None else knob.default


def _toy_spec():
    from kamera.toy.model import WEIGHTS, read_spec

    return read_spec(WEIGHTS / "window")[1]


def _toy_build(kind: str, i: int, seed: int, n_states: int, adapter: Adapter) -> WindowItem:
    from kamera.toy.window_task import window_item

    if getattr(adapter, "variant", None) != "window":
        raise ValueError(f"window_toy items come from the toy window model's task; {adapter.name} is not toy_window")
    return window_item(adapter.task, kind, i, seed, n_states)


@dataclass(frozen=True)
class ToyWindowBench(WindowBench):
    """The toy window task. ``n_states``: K of the reorder / divergent / refresh streams (null: 3, 3, 4)."""

    frames: ClassVar[bool] = False  # the toy window model's own streams

    def problems(self, model: str, opts: dict) -> list[str]:
        p = [] if model == "toy_window" else [f"bench={self.name} draws its items from the toy window model's task: "
                                              f"model=toy_window, not {model}"]
        n = opts["n_states"]
        if n is not None and not (is_int(n, 1) and n <= _toy_spec().max_states):
            p.append(f"bench.kwargs.n_states={n!r}: must be null or an integer in 1..{_toy_spec().max_states}")
        return p

    def window(self, opts: dict) -> int | None:
        """The toy window model's own k (its task spec)."""
        return _toy_spec().window

    def select(self, subsets: list[str], split: str, seed: int, n: int | None, opts: dict, read: Read) -> Selection:
        from kamera.toy.window_task import item_id

        kinds, spec, per_kind, entries = subsets, _toy_spec(), 64 if n is None else n, []
        for kind in kinds:
            default = default_states(kind)
            states = 3 if default is None else (opts["n_states"] or default)
            entries += [WindowEntry(item_id(kind, seed, i), kind, split, item_id(kind, seed, i),
                                    partial(_toy_build, kind, i, seed, states),
                                    {"kind": kind, "n_states": states, "window": spec.window})
                        for i in range(per_kind)]
        return Selection(entries, n_requested=n,
                         report=f"{per_kind} items of each toy window stream ({', '.join(kinds)})")

    def refuses(self, probe: WindowProbe, entry: WindowEntry) -> str | None:
        kind, stream = entry.meta["kind"], probe.stream
        if stream != kind:
            return (f"{probe.name} reads the toy task's {stream} stream; {entry.item_id} is a {kind} stream"
                    if stream else f"the toy window task has no stream built for {probe.name}")
        k = getattr(probe, "n_chunks", None)
        if k is not None and k != entry.meta["n_states"]:
            return (
                f"{probe.name} with n_chunks={k} needs a stream of {k} states; "
                f"{entry.item_id} has {entry.meta['n_states']}"
            )
        window = entry.meta["window"]
        if probe.name == "survivor" and probe.survivor % window != window - 2:
            return f"the toy survivor stream puts the survivor at window slot {window - 2}, not {probe.survivor}"
        return None


SPEC = ToyWindowBench("window_toy", KINDS, KINDS, "heldout", {"n_states": None})
