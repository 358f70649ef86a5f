"""The arm interface: one small dataclass per reuse method, its knobs as fields.

An arm turns an item's shared context (:class:`~kamera.context.ReuseContext`) into the query
forward it would serve, plus the KV bytes it stores or recomputes for B and its parameters as row
columns. Adding an arm is adding a file with a ``@register`` dataclass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from kamera.context import ReuseContext
from kamera.models.base import Adapter, ForwardOut

ARMS: dict[str, type[Arm]] = {}


class UnknownArmError(ValueError):
    """An arm name no module registered."""


class ArmRefusal(ValueError):
    """An arm cannot serve this family or this item (the reason says why); the runner skips it, logged."""


@dataclass
class ArmOutput:
    """An arm's result on one item: its query forward, the bytes it stores / recomputes for B, its knobs."""

    out: ForwardOut
    bytes: int
    params: dict


@dataclass
class Arm:
    """Base class; subclasses are dataclasses whose fields are the arm's knobs."""

    name: ClassVar[str] = ""

    def run(self, ctx: ReuseContext) -> ArmOutput:
        raise NotImplementedError

    def refuses(self, adapter: Adapter) -> str | None:
        """Why this arm cannot serve ``adapter``'s family, or None if it can."""
        return None

    def params(self) -> dict:
        """The knobs as row columns."""
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        """The row's arm label (e.g. ``patch_r16``); defaults to the registered name."""
        return self.name


def register(cls: type[Arm]) -> type[Arm]:
    """Class decorator: make an arm available by its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a non-empty name")
    if cls.name in ARMS and ARMS[cls.name] is not cls:
        raise ValueError(f"arm name {cls.name!r} registered twice ({ARMS[cls.name].__name__}, {cls.__name__})")
    ARMS[cls.name] = cls
    return cls


def make_arm(name: str, **knobs) -> Arm:
    """Build a registered arm from its name and knobs (unknown names list the valid ones)."""
    if name not in ARMS:
        raise UnknownArmError(f"unknown arm {name!r}; registered arms: {', '.join(sorted(ARMS))}")
    fields = {f.name for f in dataclasses.fields(ARMS[name])}
    bad = sorted(set(knobs) - fields)
    if bad:
        raise ValueError(f"arm {name!r} has no knob(s) {bad}; its knobs are {sorted(fields)}")
    return ARMS[name](**knobs)
