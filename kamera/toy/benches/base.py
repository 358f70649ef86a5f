"""The interface of a benchmark whose items are the model's own task (the arm-item shape's second source beside
the data benchmarks of :mod:`kamera.data`): selecting needs the loaded model, so preflight checks the names only."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.items.eval import EvalItem


@dataclass(frozen=True)
class ModelBench:
    """A benchmark drawn from the model's own task: its name and the query kinds its ``bench.subset`` may list."""

    name: str
    kinds: tuple[str, ...]

    def problems(self, model: str, subset: str | None) -> list[str]:
        """The model and the subset, one line each (no weights): the subset's kinds must be the task's."""
        kinds = [k.strip() for k in str(subset).split(",")] if subset else []
        bad = [k for k in kinds if k not in self.kinds]
        return [f"bench.subset={subset!r}: the toy task has no query kind {bad}; its kinds are {list(self.kinds)}"] \
            if bad else []

    def select(self, adapter, n: int | None, seed: int, subset: str | None) -> list[EvalItem]:
        """The items, deterministically, in the form ``adapter`` reads them."""
        raise NotImplementedError
