"""The forwards an item's plugins run, counted before they run: which shared quantities a shared quantity
computes first (:class:`~kamera.reuse.context.ReuseContext`), the forward each shared quantity runs, one query
per arm, and each probe's own ``cost_forwards``. :mod:`kamera.sweep.cost` turns them into H100-hours.
"""

from __future__ import annotations

from kamera.models.flops import Forward, ItemShape, WindowShape

# which shared quantities a shared quantity computes first (kamera.reuse.context.ReuseContext),
# and the forward each runs
_DEPENDS = {
    "conditioned": {"full"},
    "relocated": {"canonical"},
    "deficit": {"conditioned", "relocated"},
    "patch": {"deficit"},
    "blind": {"full", "relocated"},
}


def item_forwards(shape: ItemShape, arms: list, probes: list, n_layers: int) -> list[Forward]:
    """The forwards of one arm item: the shared ones the plugins need (once each), one query per arm, and
    each probe's own ``cost_forwards``."""
    needs = set().union(*(p.needs for p in [*arms, *probes])) | ({"full", "blind"} if arms else set())
    while True:
        more = needs.union(*(_DEPENDS.get(n, set()) for n in needs))
        if more == needs:
            break
        needs = more
    shared = {"full": shape.full(), "canonical": shape.solo(), "blind": shape.query_over(), "oracle": shape.full()}
    out = [f for n, f in shared.items() if n in needs]
    if arms:
        out.append(shape.query_over(len(arms)))
    return out + [f for p in probes for f in p.cost_forwards(shape, n_layers)]


def window_forwards(shape: WindowShape, probes: list, n_layers: int) -> list[Forward]:
    """The forwards of one window item: each window probe's ``cost_forwards``."""
    return [f for p in probes for f in p.cost_forwards(shape, n_layers)]
