"""Probes: measurements on an item's shared forwards that are not an arm's output, one file each.

Importing this package imports every probe module, so ``PROBES`` lists them all.
"""

from kamera.discover import import_all
from kamera.probes.base import PROBES, Probe, UnknownProbeError, make_probe, register

import_all(__name__)  # every module registers its plugin (kamera.discover)

__all__ = ["PROBES", "Probe", "UnknownProbeError", "make_probe", "register"]
