"""Progress of a long job: items done / total, rate and ETA, logged as it goes."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

log = logging.getLogger("kamera.progress")


class Progress:
    """Counts finished items and logs ``done/total``, items per minute and ETA."""

    def __init__(self, total: int, done: int = 0, what: str = "items", every_s: float = 0.0) -> None:
        self.total, self.done, self.what, self.every_s = total, done, what, every_s
        self._start_done = done
        self._t0 = time.monotonic()
        self._last = -float("inf")

    def step(self, note: str = "") -> str:
        self.done += 1
        now = time.monotonic()
        ran = self.done - self._start_done
        rate = ran / max(now - self._t0, 1e-9)
        eta = timedelta(seconds=round((self.total - self.done) / rate)) if rate > 0 else "?"
        line = f"{self.done}/{self.total} {self.what} | {60 * rate:.1f}/min | ETA {eta}" + (
            f" | {note}" if note else ""
        )
        if now - self._last >= self.every_s or self.done == self.total:
            log.info(line)
            self._last = now
        return line
