"""SIGTERM as an exit through the process's cleanup: a kill, a Slurm timeout or ``timeout`` ends a job or a render by
raising :class:`SystemExit` in the main thread, so ``finally`` blocks run (temp files removed, the run's end
recorded) instead of the process vanishing around them. SIGKILL cannot be caught; what it leaves (a dot-named temp
file beside an output) is replaced by the next write of that output."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def terminate_as_exit() -> Iterator[None]:
    """Within the block, SIGTERM raises ``SystemExit(143)`` (128 + 15, the shell's code for it); restored after."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
