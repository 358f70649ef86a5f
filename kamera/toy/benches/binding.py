"""``binding``: the toy binding task's held-out items (:mod:`kamera.toy.items`) for the toy models trained on it
(``toy_binding`` reads A and B as pictures, ``toy_binding_text`` as words); ``bench=binding_words`` asks the same
task in words of any text model (:mod:`kamera.data.binding_words`)."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.items.eval import EvalItem
from kamera.toy.benches.base import ModelBench
from kamera.toy.items import toy_items
from kamera.toy.task import KINDS


@dataclass(frozen=True)
class BindingBench(ModelBench):
    """The toy binding task: a toy model's own held-out items."""

    def problems(self, model: str, subset: str | None) -> list[str]:
        p = [] if model.startswith("toy_") else [
            f"bench={self.name} needs a toy model (toy_binding, toy_binding_text), not {model}; "
            f"bench=binding_words asks the same task in words of any text model"]
        return p + super().problems(model, subset)

    def select(self, adapter, n: int | None, seed: int, subset: str | None) -> list[EvalItem]:
        return toy_items(adapter, n_items=n, seed=seed, subset=subset)


SPEC = BindingBench("binding", KINDS)
