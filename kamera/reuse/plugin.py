"""Named plugins over an item's shared forwards (reuse arms, probes): one small dataclass each.

A plugin class has a ``name`` (what config files and rows call it), the shared quantities of
:class:`~kamera.reuse.context.ReuseContext` it reads (``needs``) and its knobs as dataclass fields. The
runner computes the union of the ``needs`` of a job's plugins once per item, before any plugin runs,
so it never has to know a plugin by name and a plugin's own forwards can be counted apart from the
shared ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

if TYPE_CHECKING:
    from kamera.models.base import Adapter

# The shared quantities a plugin may declare, in the order the runner computes them (each is a
# cached attribute of ReuseContext: the re-prefill, the canonical KV(B|∅), R(δ)·KV(B|∅), KV(B|A), Δ,
# the full-rank layer patch, blind reuse's query forward, the 4D-mask oracle forward).
SHARED = ("full", "canonical", "relocated", "conditioned", "deficit", "patch", "blind", "oracle")



@dataclass
class Plugin:
    """Base of arms and probes: a registered ``name``, the shared quantities it reads, knobs as fields."""

    name: ClassVar[str] = ""
    needs: ClassVar[frozenset[str]] = frozenset()
    drives_layers: ClassVar[bool] = False  # runs the decoder layer by layer over chosen rows (kamera.reuse.recompute)

    def params(self) -> dict:
        """The knobs as plain values (row columns)."""
        return dataclasses.asdict(self)

    def refuses(self, adapter: Adapter) -> str | None:
        """Why this plugin cannot run on ``adapter``'s model, or None: the model refuses the layer driver (where
        ``drives_layers``) or a shared quantity the plugin ``needs`` (:meth:`kamera.models.base.Adapter.refuses`).
        A subclass with reasons of its own checks those first, then returns this one's (``super().refuses``)."""
        asks = (["layers"] if self.drives_layers else []) + sorted(self.needs)
        return next((why for need in asks if (why := adapter.refuses(need))), None)


T = TypeVar("T", bound=Plugin)


class UnknownNameError(ValueError):
    """A plugin name no module registered."""


class Registry(Generic[T]):
    """The registered plugins of one kind ("arm", "probe"), by name."""

    def __init__(self, kind: str, unknown: type[UnknownNameError] = UnknownNameError) -> None:
        self.kind = kind
        self.unknown = unknown
        self.entries: dict[str, type[T]] = {}

    def register(self, cls: type[T]) -> type[T]:
        """Class decorator: make ``cls`` available by its ``name`` (its ``needs`` must be shared quantities)."""
        name = getattr(cls, "name", "")
        if not name:
            raise ValueError(f"{cls.__name__} needs a non-empty name")
        if name in self.entries and self.entries[name] is not cls:
            raise ValueError(
                f"{self.kind} name {name!r} registered twice ({self.entries[name].__name__}, {cls.__name__})"
            )
        bad = sorted(set(getattr(cls, "needs", ())) - set(SHARED))
        if bad:
            raise ValueError(f"{cls.__name__}.needs lists {bad}; shared quantities are {list(SHARED)}")
        self.entries[name] = cls
        return cls

    def make(self, name: str, **knobs) -> T:
        """Build a registered plugin from its name and knobs (unknown names and knobs list the valid ones)."""
        if name not in self.entries:
            raise self.unknown(
                f"unknown {self.kind} {name!r}; registered {self.kind}s: {', '.join(sorted(self.entries))}"
            )
        fields = {f.name for f in dataclasses.fields(self.entries[name])}
        bad = sorted(set(knobs) - fields)
        if bad:
            raise ValueError(f"{self.kind} {name!r} has no knob(s) {bad}; its knobs are {sorted(fields)}")
        return self.entries[name](**knobs)
