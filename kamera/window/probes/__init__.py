"""The window probes (§5, App. B, D, E), one file each behind :class:`~kamera.window.probes.base.WindowProbe`.

Importing this package imports every probe module, so :data:`PROBES` lists them all (the ``window probe``
kind of :class:`kamera.reuse.plugin.Registry`); :func:`make_probe` builds one by name and knobs.
"""

from kamera.discover import import_all
from kamera.window.probes.base import (
    PROBES,
    ProbeRefusal,
    UnknownProbeError,
    WindowProbe,
    make_probe,
    register,
)

import_all(__name__)  # every module registers its plugin (kamera.discover)

__all__ = ["PROBES", "ProbeRefusal", "UnknownProbeError", "WindowProbe", "make_probe", "register"]
