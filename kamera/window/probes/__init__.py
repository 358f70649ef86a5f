"""The window probes (§5, App. B, D, E), one file each behind :class:`~kamera.window.probes.base.WindowProbe`.

Importing this package imports every probe module, so :data:`PROBES` lists them all (the ``window probe``
kind of :class:`kamera.reuse.plugin.Registry`); :func:`make_probe` builds one by name and knobs.
"""

import importlib
import pkgutil

from kamera.window.probes.base import (
    PROBES,
    ProbeRefusal,
    UnknownProbeError,
    WindowProbe,
    make_probe,
    register,
)

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["PROBES", "ProbeRefusal", "UnknownProbeError", "WindowProbe", "make_probe", "register"]
