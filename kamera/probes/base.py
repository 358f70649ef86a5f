"""The probe interface: a measurement on an item's shared forwards, returned as long-format records.

A probe reads the shared quantities it declares in ``needs`` (computed once per item by the runner,
see :data:`kamera.reuse.plugin.SHARED`) and returns one record per measured cell (a layer, a channel, a
token, a head: whatever it resolves), each a flat dict of scalars. The runner stores the records in
the job's shard beside the rows, keyed by (item, probe label, knobs), with the same resume and
completeness rules, so a diagnostic figure is a pure function of stored data.
Adding a probe is adding a file with a ``@register`` dataclass named ``<Measure>Probe`` and a
``conf/probe/<label>.yaml`` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kamera.reuse.context import ReuseContext
from kamera.reuse.plugin import Plugin, Registry, UnknownNameError


class UnknownProbeError(UnknownNameError):
    """A probe name no module registered."""


@dataclass
class Probe(Plugin):
    """Base class; subclasses are dataclasses whose fields are the probe's knobs; ``version`` is its code version,
    stamped on every record it makes (bump it when a change changes a stored number, as for arms)."""

    version: ClassVar[int] = 1

    def run(self, ctx: ReuseContext) -> list[dict]:
        """The measurements on one item, one flat record (str / int / float values) per cell."""
        raise NotImplementedError

    def problems(self, device: str = "cpu", n_layers: int | None = None) -> list[str]:
        """What is wrong with this probe for a job, known before any weights load, one line each (the arguments of
        :meth:`kamera.arms.base.Arm.problems`)."""
        return []


PROBE_REGISTRY: Registry[Probe] = Registry("probe", UnknownProbeError)
PROBES = PROBE_REGISTRY.entries
register = PROBE_REGISTRY.register
make_probe = PROBE_REGISTRY.make
