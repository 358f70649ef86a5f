"""The window benchmark interface: where a window job's items come from (the second item shape of
:mod:`kamera.job`), one module per benchmark in this folder, each declaring its ``SPEC`` (:mod:`kamera.discover`).

A window benchmark selects window items deterministically, without a model, as light
:class:`WindowEntry` records (ids for the store, a builder the runner calls with the loaded model), so
selection, identity, preflight and status need no weights and a job holds one item's media at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from kamera.data import get_benchmark
from kamera.items.selection import Selection
from kamera.items.window import WindowEntry
from kamera.knobs import is_int
from kamera.window.probes.base import WindowProbe

Read = Callable[[str, dict], Selection]  # (data benchmark, loader kwargs) → the job's selection of it


@dataclass(frozen=True)
class WindowBench:
    """A window benchmark: its subsets and split, its options (``bench.kwargs``) with their defaults, the data
    benchmark (:mod:`kamera.data`) it is cut from (``reads``; None: streams made in memory). ``frames``: every chunk
    of its items is video frames (a text-only model cannot read it, said in preflight)."""

    frames: ClassVar[bool] = True
    name: str
    subsets: tuple[str, ...]
    default_subsets: tuple[str, ...]
    split: str
    options: dict
    reads: str | None = None

    @property
    def dir_name(self) -> str | None:
        """The directory it reads under ``paths.data``: its data benchmark's (None: it reads no files)."""
        return None if self.reads is None else get_benchmark(self.reads).dir_name

    def resolve(self, subset: str | None, split: str | None) -> tuple[list[str], str]:
        """(subsets, split) spelled out; ValueError naming the valid ones."""
        names = list(self.default_subsets) if subset is None else [s.strip() for s in subset.split(",")]
        bad = [s for s in names if s not in self.subsets]
        if bad or not names:
            raise ValueError(f"{self.name}: unknown subset(s) {bad}; valid: {list(self.subsets)}")
        if split not in (None, self.split):
            raise ValueError(f"{self.name}: unknown split {split!r}; valid: [{self.split!r}]")
        return names, self.split

    def kwargs(self, given: dict) -> dict:
        """The options with the defaults filled in; ValueError naming unknown ones."""
        bad = sorted(set(given) - set(self.options))
        if bad:
            raise ValueError(f"bench.kwargs {bad} are not options of {self.name}; it takes {sorted(self.options)}")
        return {**self.options, **given}

    def problems(self, model: str, opts: dict) -> list[str]:
        """Option values and model constraints, one line each (no data, no weights)."""
        return []

    def window(self, opts: dict) -> int | None:
        """The window of k chunks its items have (``window`` among the options; None where not a valid count)."""
        k = opts.get("window")
        return k if is_int(k, 1) else None

    def select(self, subsets: list[str], split: str, seed: int, n: int | None, opts: dict, read: Read) -> Selection:
        """The job's entries, chosen deterministically (``n`` None: the benchmark's default count); ``read(name,
        kwargs)`` is the job's selection of data benchmark ``name`` for a window benchmark cut from one."""
        raise NotImplementedError

    def refuses(self, probe: WindowProbe, entry: WindowEntry) -> str | None:
        """Why ``probe`` cannot run on ``entry`` (it is not the stream the probe reads), or None."""
        return None
