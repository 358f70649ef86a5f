"""Window benchmarks, one module each with its ``SPEC`` (a :class:`~kamera.window.benches.base.WindowBench`), found
by the rule every plugin folder follows (:mod:`kamera.discover`):

    window_toy        (:mod:`~kamera.window.benches.toy`) the toy window task (:mod:`kamera.toy.window_task`) for
                      ``toy_window``: one purpose-built stream per kind (subset), ``n_items`` items per kind; a
                      probe runs only on the stream it reads (:attr:`WindowProbe.stream`; the others are
                      refused, with the reason, per item)
    window_synthetic  (:mod:`~kamera.window.benches.synthetic`) seeded noise-frame streams for the tiny random
                      families: identities and costs, not effects
    videomme_window   (:mod:`~kamera.window.benches.videomme`) Video-MME (:mod:`kamera.data.videomme`) cut into
                      cached video segments, the paper's Table 1 workload
"""

from kamera.discover import declared
from kamera.window.benches.base import Read, WindowBench

WINDOW_BENCHES: dict[str, WindowBench] = declared(__name__, WindowBench)

__all__ = ["WINDOW_BENCHES", "Read", "WindowBench"]
