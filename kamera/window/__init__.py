"""Window operations (paper §5, App. B, D, E): a window item, its layouts, the shared forwards, the probes.

A :class:`WindowItem` is a stream of chunks and a query; an operation (:mod:`kamera.window.ops`: slide,
recall, reorder, drift) turns one window :class:`Layout` into another; a :class:`WindowContext` runs each
layout's re-prefill (the operation's reference) and each chunk's canonical once; the probes
(:mod:`kamera.window.probes`) build the target chunk's KV in the ways the paper compares and return one
row per (item, setting, variant). A window job (:mod:`kamera.window.shape`) runs them through the runner;
``make table1`` and ``make turnover`` draw Table 1 and the turnover curve at tiny scale.
"""

from kamera.items.window import WindowItem, from_spans
from kamera.window.context import WindowContext, WindowView
from kamera.window.ops import Layout
from kamera.window.probes import PROBES, ProbeRefusal, WindowProbe, make_probe

__all__ = [
    "PROBES",
    "Layout",
    "ProbeRefusal",
    "WindowContext",
    "WindowItem",
    "WindowProbe",
    "WindowView",
    "from_spans",
    "make_probe",
]
