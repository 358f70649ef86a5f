"""Exceptions of the benchmark loaders: missing data, one bad source row (:class:`kamera.errors.ItemError`),
one unreadable media file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kamera.errors import ItemError  # one class for the loaders and the runner

__all__ = ["BenchmarkDataMissing", "ItemError", "MediaError"]


class BenchmarkDataMissing(FileNotFoundError):
    """A benchmark's root or one of its files is missing; the message says what was expected and where
    the benchmark is published, so the fix is obvious from the error alone."""

    def __init__(self, bench: str, tried: Path | str, expected: Sequence[str], published: str, why: str = ""):
        self.bench = bench
        self.tried = Path(tried)
        self.expected = tuple(expected)
        self.published = published
        lines = [f"{bench}: {why or 'benchmark data not found'}: {self.tried}"]
        lines.append("expected under the benchmark root: " + ", ".join(self.expected))
        lines.append(f"published at: {published}")
        lines.append("pass root=<dir> or set KAMERA_DATA to the folder holding the benchmark directory")
        super().__init__("\n  ".join(lines))


class MediaError(OSError):
    """A media reference (image file or bytes, video frame, PDF page) cannot be read or decoded."""
