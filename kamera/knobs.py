"""Checks of knob values, shared by arms, probes, window probes, diagnostics, window benchmarks and the job's
keys: one rule per kind of value, one message shape (``<owner>: <knob> must be <what>, got <value>``), so a
bad value reads the same wherever it is given. Booleans are never numbers here (``True`` is not a count).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def is_int(value: object, low: int | None = None) -> bool:
    """Whether ``value`` is an int (not a bool), at least ``low`` when given."""
    return isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)


def is_number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (not a bool)."""
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _fail(owner: str, knob: str, what: str, value: object) -> None:
    raise ValueError(f"{owner}: {knob} must be {what}, got {value!r}")


def check_int(owner: str, knob: str, value: object, low: int) -> None:
    """An integer knob of at least ``low``."""
    if not is_int(value, low):
        _fail(owner, knob, "a non-negative int" if low == 0 else f"an int ≥ {low}", value)


def check_count(owner: str, knob: str, value: object, allow_none: bool = False) -> None:
    """A token count: a non-negative int (or None where the knob allows it)."""
    if not (is_int(value, 0) or (value is None and allow_none)):
        _fail(owner, knob, "a non-negative int or None" if allow_none else "a non-negative int", value)


def check_rank(owner: str, rank: object) -> None:
    """A patch rank knob: a non-negative int, or None for full rank."""
    if not (rank is None or is_int(rank, 0)):
        _fail(owner, "rank", "a non-negative int or None (full rank)", rank)


def check_fraction(owner: str, knob: str, value: object) -> None:
    """A fraction of tokens or layers: a number in [0, 1]."""
    if not (is_number(value) and 0.0 <= value <= 1.0):
        _fail(owner, knob, "a number in [0, 1]", value)


def check_share(owner: str, knob: str, value: object) -> None:
    """A share that must select something: a number in (0, 1]."""
    if not (is_number(value) and 0 < value <= 1):
        _fail(owner, knob, "a number in (0, 1]", value)


def check_counts(owner: str, knob: str, values: Sequence[int], minimum: int = 1) -> list[int]:
    """A non-empty list of ints ≥ ``minimum`` (returned as a list)."""
    out = list(values)
    if not out:
        raise ValueError(f"{owner}: {knob} is empty")
    bad = [v for v in out if not is_int(v, minimum)]
    if bad:
        _fail(owner, knob, f"ints ≥ {minimum}", bad)
    return out
