"""Benchmarks an engine job serves (:mod:`kamera.engine.shape`), one module each with its ``SPEC`` (an
:class:`~kamera.engine.benches.base.EngineBench`), found by the rule every benchmark folder follows
(:mod:`kamera.discover`):

    engine_mc   (:mod:`~kamera.engine.benches.engine_mc`) random token ids [prefix · A · B · query] with a four-way
                choice: what a served model takes without a tokenizer
"""

from kamera.discover import declared
from kamera.engine.benches.base import EngineBench

ENGINE_BENCHES: dict[str, EngineBench] = declared(__name__, EngineBench)

__all__ = ["ENGINE_BENCHES", "EngineBench"]
