"""Benchmarks whose items come from the model itself, one module each with its ``SPEC`` (a
:class:`~kamera.toy.benches.base.ModelBench`), found by the rule every plugin folder follows (:mod:`kamera.discover`):

    binding   (:mod:`~kamera.toy.benches.binding`) the toy binding task's held-out items for ``toy_binding`` and
              ``toy_binding_text``, in the form the model was trained on (words or drawn images)
"""

from kamera.discover import declared
from kamera.toy.benches.base import ModelBench

MODEL_BENCHES: dict[str, ModelBench] = declared(__name__, ModelBench)

__all__ = ["MODEL_BENCHES", "ModelBench"]
