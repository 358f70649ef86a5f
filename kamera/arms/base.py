"""The arm interface: one small dataclass per reuse method, its knobs as fields.

An arm turns an item's shared context (:class:`~kamera.reuse.context.ReuseContext`) into the query
forward it would serve, plus the KV bytes it stores or recomputes for B and its parameters as row
columns. It declares the shared quantities it reads (``needs``, see :data:`kamera.reuse.plugin.SHARED`):
the runner computes those once per item before any arm runs, so an arm's own forwards are counted
apart. Adding an arm is adding a file with a ``@register`` dataclass named ``<Method>Arm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kamera.models.base import ForwardOut
from kamera.reuse.context import ReuseContext
from kamera.reuse.plugin import Plugin, Registry, UnknownNameError


class UnknownArmError(UnknownNameError):
    """An arm name no module registered."""


class ArmRefusal(ValueError):
    """An arm cannot serve this family or this item (the reason says why); the runner skips it, logged."""


@dataclass
class ArmOutput:
    """An arm's result on one item: its query forward, the bytes it stores / recomputes for B, its knobs.

    ``recomputed_tokens`` counts the (B token, layer) cells the arm ran through the model itself
    (token- and layer-recompute arms); ``patch_dtype`` names the dtype a stored patch's factors are
    kept in ("" for arms without one).
    """

    out: ForwardOut
    bytes: int
    params: dict
    recomputed_tokens: int = 0
    patch_dtype: str = ""


@dataclass
class Arm(Plugin):
    """Base class; subclasses are dataclasses whose fields are the arm's knobs.

    ``version``: the arm's code version, stamped on every row it makes (docs/identity.md). A subclass declares
    ``version = 2`` (and so on) beside ``run`` when a change to it changes a stored number; every job then
    recomputes that arm's rows on its next run and leaves the other arms' rows as they are."""

    version: ClassVar[int] = 1

    def run(self, ctx: ReuseContext) -> ArmOutput:
        raise NotImplementedError

    def problems(self, device: str = "cpu", n_layers: int | None = None) -> list[str]:
        """What is wrong with this arm for a job, known before any weights load (preflight), one line each:
        ``device`` is the job's device type ("cpu" or "cuda"), ``n_layers`` the model's decoder layers (None where
        its config cannot be read without loading it)."""
        return []


ARM_REGISTRY: Registry[Arm] = Registry("arm", UnknownArmError)
ARMS = ARM_REGISTRY.entries
register = ARM_REGISTRY.register
make_arm = ARM_REGISTRY.make
