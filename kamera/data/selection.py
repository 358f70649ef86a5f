"""Item selection: stable ids, seeded order, length filter, and the report of what was skipped and why.

Selection is deterministic: candidate rows are ordered by ``sha256(f"{seed}:{item_id}")`` (so a given
seed always yields the same order, independent of file order or Python version, and adding rows does
not reshuffle the others), then walked in that order, building items until ``n_items`` are accepted.
Rows that fail to build (bad data, undecodable media, no B) or exceed ``max_tokens`` are skipped with
their reason logged and recorded in the :class:`LoadReport`; none is dropped silently.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kamera.data.errors import ItemError, MediaError

if TYPE_CHECKING:
    from kamera.data.schema import ChunkedItem

log = logging.getLogger("kamera.data")

# Row-level failures that become a logged skip instead of aborting the whole load. KeyError /
# TypeError / IndexError cover malformed source rows (a missing or mistyped field).
ROW_ERRORS = (ItemError, MediaError, KeyError, TypeError, ValueError, IndexError)


@dataclass(frozen=True)
class Skip:
    """One candidate item that was not returned, with the reason and the stage that rejected it."""

    item_id: str
    reason: str
    stage: str  # "row" (unparseable source row), "build" (bad data / media / no B), "length"


@dataclass
class LoadReport:
    """What a load saw: eligible rows, rows filtered out by the benchmark's recipe (counted by reason),
    rows skipped for bad data or length (each with its reason), and the number returned."""

    bench: str
    subsets: list[str]
    split: str
    root: Path | None
    seed: int
    n_rows: int = 0
    n_selected: int = 0
    filtered: Counter[str] = field(default_factory=Counter)
    skipped: list[Skip] = field(default_factory=list)

    def skip(self, item_id: str, reason: str, stage: str) -> None:
        """Record and log one skipped item."""
        self.skipped.append(Skip(item_id, reason, stage))
        log.warning("%s: skipped %s (%s): %s", self.bench, item_id, stage, reason)

    def filter(self, reason: str) -> None:
        """Count one source row that the benchmark's recipe excludes (not an error)."""
        self.filtered[reason] += 1

    def skipped_for(self, stage: str) -> list[Skip]:
        """The skips of one stage (e.g. ``"length"``)."""
        return [s for s in self.skipped if s.stage == stage]

    def summary(self) -> str:
        """One line: selected / eligible, skips by stage, filters by reason."""
        stages = Counter(s.stage for s in self.skipped)
        return (
            f"{self.bench} {','.join(self.subsets)}/{self.split}: {self.n_selected} items selected of "
            f"{self.n_rows} eligible rows; skipped {dict(stages) or 0}; filtered out {dict(self.filtered) or 0}"
        )


class LoadedItems(list):
    """The selected items (a plain list, sorted by item id) with the :class:`LoadReport` attached."""

    def __init__(self, items: Iterable[ChunkedItem], report: LoadReport):
        super().__init__(items)
        self.report = report


@dataclass(frozen=True)
class Row:
    """One eligible source row: its stable item id and how to build the item (lazily)."""

    item_id: str
    build: Callable[[], ChunkedItem]


def selection_order(ids: Sequence[str], seed: int) -> list[str]:
    """Ids in the seeded selection order (a stable hash order, not dependent on input order)."""
    return sorted(ids, key=lambda i: (hashlib.sha256(f"{seed}:{i}".encode()).hexdigest(), i))


def select_rows(
    rows: Sequence[Row],
    report: LoadReport,
    *,
    n_items: int | None,
    seed: int,
    max_tokens: int | None,
    length_fn: Callable[[ChunkedItem], int] | None,
    verify_media: bool,
    strict: bool,
) -> LoadedItems:
    """Build items in seeded order until ``n_items`` pass; skip (and record) the ones that fail."""
    by_id = {r.item_id: r for r in rows}
    if len(by_id) != len(rows):
        dup = sorted(k for k, c in Counter(r.item_id for r in rows).items() if c > 1)
        raise RuntimeError(f"{report.bench}: duplicate item ids {dup[:5]}; item ids must be unique")
    report.n_rows = len(rows)
    order = sorted(by_id) if n_items is None else selection_order(list(by_id), seed)
    items: list[ChunkedItem] = []
    for item_id in order:
        if n_items is not None and len(items) >= n_items:
            break
        try:
            item = by_id[item_id].build()
            if verify_media:
                for ref in item.media_refs():
                    if ref.kind == "image":  # frames and pages were probed while building
                        ref.load()
        except ROW_ERRORS as e:
            if strict:
                raise
            report.skip(item_id, f"{type(e).__name__}: {e}", "build")
            continue
        if max_tokens is not None and length_fn is not None:
            n = length_fn(item)
            if n > max_tokens:
                report.skip(item_id, f"encoded length {n} exceeds max_tokens {max_tokens}", "length")
                continue
        items.append(item)
    items.sort(key=lambda it: it.item_id)
    report.n_selected = len(items)
    if n_items is not None and len(items) < n_items:
        log.warning(
            "%s: only %d of the %d requested items could be loaded", report.bench, len(items), n_items
        )
    log.info("%s", report.summary())
    return LoadedItems(items, report)
