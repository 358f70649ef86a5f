"""Probes: measurements on an item's shared forwards that are not an arm's output, one file each.

Importing this package imports every probe module, so ``PROBES`` lists them all.
"""

import importlib
import pkgutil

from kamera.probes.base import PROBES, Probe, UnknownProbeError, make_probe, register

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["PROBES", "Probe", "UnknownProbeError", "make_probe", "register"]
