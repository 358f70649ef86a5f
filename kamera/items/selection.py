"""What a job selected: its items, the annotation files they came from and what the loader skipped."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kamera.items.eval import EvalItem
from kamera.items.window import WindowEntry


@dataclass
class Selection:
    """The items a job evaluates (evaluation items, or a window job's window entries), the annotation files
    they came from, the rows the loader skipped with their reasons (``item_id``, ``reason``, ``stage``) and the
    media files the selected items read (``media``: images, videos, PDFs; the job's data fingerprint digests them)."""

    items: list[EvalItem] | list[WindowEntry]
    root: Path | None = None
    files: list[Path] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    n_requested: int | None = None
    report: str = ""
    media: list[Path] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [it.item_id for it in self.items]

    @property
    def defects(self) -> list[dict]:
        """Rows skipped for bad data (unparseable, malformed, media that does not decode), not by the recipe."""
        return [s for s in self.skipped if s["stage"] in ("row", "build")]

    def record(self) -> dict:
        """What a shard stores about its selection."""
        return {"item_ids": self.ids, "n_requested": self.n_requested, "skipped": self.skipped,
                "root": str(self.root) if self.root else None, "report": self.report}
