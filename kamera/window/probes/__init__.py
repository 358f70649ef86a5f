"""The window probes (§5, App. D, App. E), one file each behind :class:`~kamera.window.probes.base.Probe`.

Importing this package registers every probe in :data:`PROBES`; :func:`make_probe` builds one by name.
"""

from kamera.window.probes import (
    deep_half,
    disposability,
    divergent,
    excess,
    forks,
    recall,
    refresh,
    reorder,
    revert,
    survivor,
)
from kamera.window.probes.base import PROBES, Probe, ProbeRefusal, UnknownProbeError, make_probe, register

__all__ = [
    "PROBES",
    "Probe",
    "ProbeRefusal",
    "UnknownProbeError",
    "deep_half",
    "disposability",
    "divergent",
    "excess",
    "forks",
    "make_probe",
    "recall",
    "refresh",
    "register",
    "reorder",
    "revert",
    "survivor",
]
