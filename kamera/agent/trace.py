"""Agent traces: what an agent's window holds at each step, in chunk ids of a pool (a window item's chunks).

A trace is a seeded sequence of steps; each step is the window's contents in order (chunk ids into
:attr:`kamera.items.window.WindowItem.chunks`: history ids first, then foreign ids) and is read by the
item's query. Three generators are named after the paper's agents (§1, Fig. 1):

    web    a window of k slides by one chunk a step (evict the leading chunk, admit the next); with rate
           ``lookback`` the admitted chunk is an evicted one instead (the agent looks back)
    video  the same k chunks re-examined under changing orders: with rate ``reorder`` a new order of the
           set, else with rate ``lookback`` an order used before, else the same order again
    doc    coarse to fine with revisits: k pages spread over the pool, then runs of k consecutive pages
           from each coarse page in turn (the filter), and with rate ``lookback`` a window seen before

A user's own trace is a JSONL file (:func:`read_jsonl`): one step a line, ``{"window": [ids…]}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

KINDS = ("web", "video", "doc", "jsonl")


@dataclass(frozen=True)
class Trace:
    """A named sequence of windows (each a tuple of distinct chunk ids, in the order the query reads them)."""

    kind: str
    steps: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError(f"a {self.kind} trace needs at least one step")
        for t, w in enumerate(self.steps):
            if not w or len(set(w)) != len(w) or any(not isinstance(c, int) or c < 0 for c in w):
                raise ValueError(
                    f"{self.kind} trace step {t}: a window is a non-empty list of distinct chunk ids ≥ 0, "
                    f"got {list(w)}"
                )

    @property
    def chunks(self) -> tuple[int, ...]:
        """Every chunk id the trace reads, sorted."""
        return tuple(sorted({c for w in self.steps for c in w}))


def _rng(seed: int, kind: str, item: int) -> np.random.Generator:
    return np.random.default_rng([seed, KINDS.index(kind), item])


def _check(n: int, window: int, steps: int, **rates: float) -> None:
    if not isinstance(window, int) or not 1 <= window <= n:
        raise ValueError(f"trace.window={window!r}: must be an integer in 1..{n} (the pool holds {n} chunks)")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"trace.steps={steps!r}: must be an integer >= 1")
    for name, rate in rates.items():
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            raise ValueError(f"trace.{name}={rate!r}: a rate in [0, 1]")


def web(
    n: int, window: int = 4, steps: int = 12, lookback: float = 0.2, seed: int = 0, item: int = 0
) -> Trace:
    """Slide by one; with rate ``lookback`` (or once the pool is exhausted) re-admit an evicted chunk."""
    _check(n, window, steps, lookback=lookback)
    if window == n:
        raise ValueError(
            f"trace.window={window}: a web trace slides, so the pool ({n} chunks) must hold more than k"
        )
    rng, live, nxt, evicted = _rng(seed, "web", item), list(range(window)), window, []
    out = [tuple(live)]
    for _ in range(steps - 1):
        if evicted and (nxt >= n or rng.random() < lookback):
            admit = evicted.pop(int(rng.integers(len(evicted))))
        else:
            admit, nxt = nxt, nxt + 1
        evicted.append(live.pop(0))
        live.append(admit)
        out.append(tuple(live))
    return Trace("web", tuple(out))


def video(
    n: int,
    window: int = 4,
    steps: int = 12,
    reorder: float = 0.5,
    lookback: float = 0.3,
    seed: int = 0,
    item: int = 0,
) -> Trace:
    """One set of k chunks, re-examined: a new order at rate ``reorder``, a past order at rate ``lookback``."""
    _check(n, window, steps, reorder=reorder, lookback=lookback)
    rng = _rng(seed, "video", item)
    order = tuple(range(window))
    out = [order]
    for _ in range(steps - 1):
        u = rng.random()
        if u < reorder and window > 1:
            order = tuple(int(c) for c in rng.permutation(list(order)))
        elif u < reorder + lookback and len(set(out)) > 1:
            seen = sorted(set(out) - {order})
            order = seen[int(rng.integers(len(seen)))]
        out.append(order)
    return Trace("video", tuple(out))


def doc(
    n: int, window: int = 4, steps: int = 12, lookback: float = 0.3, seed: int = 0, item: int = 0
) -> Trace:
    """Coarse (k pages spread over the pool), then k consecutive pages from each coarse page in turn, revisiting a
    window seen before at rate ``lookback`` (and once every coarse page has been read)."""
    _check(n, window, steps, lookback=lookback)
    rng = _rng(seed, "doc", item)
    coarse = tuple(sorted({round(i * (n - 1) / max(window - 1, 1)) for i in range(window)}))
    anchors = [int(a) for a in rng.permutation(list(coarse))]
    out = [coarse]
    for _ in range(steps - 1):
        if not anchors or rng.random() < lookback:
            seen = sorted(set(out))
            out.append(seen[int(rng.integers(len(seen)))])
            continue
        start = min(anchors.pop(0), n - window)
        out.append(tuple(range(start, start + window)))
    return Trace("doc", tuple(out))


GENERATORS: dict[str, Callable[..., Trace]] = {"web": web, "video": video, "doc": doc}


def read_jsonl(path: str | Path, n: int) -> Trace:
    """A user's trace: one JSON object a line, ``{"window": [chunk ids]}`` (blank lines skipped), ids into a pool of
    ``n`` chunks. ValueError naming the file, the line and the cause of the first malformed line."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"trace.path={str(path)!r}: no such file")
    steps = []
    for no, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p}:{no}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(obj, dict) or "window" not in obj:
            raise ValueError(
                f'{where}: a step is an object with a "window" list of chunk ids, got {line.strip()[:80]}'
            )
        extra = sorted(set(obj) - {"window", "step", "note"})
        if extra:
            raise ValueError(
                f'{where}: unknown key(s) {extra}; a step has "window" (and optionally "step", "note")'
            )
        w = obj["window"]
        if not isinstance(w, list) or not w or any(isinstance(c, bool) or not isinstance(c, int) for c in w):
            raise ValueError(f'{where}: "window" must be a non-empty list of integer chunk ids, got {w!r}')
        bad = [c for c in w if not 0 <= c < n]
        if bad:
            raise ValueError(f"{where}: chunk id(s) {bad} out of range: the pool holds chunks 0..{n - 1}")
        if len(set(w)) != len(w):
            raise ValueError(
                f"{where}: chunk id(s) {sorted({c for c in w if w.count(c) > 1})} appear twice in one window"
            )
        steps.append(tuple(w))
    if not steps:
        raise ValueError(f"{p}: the trace has no steps (one JSON object a line)")
    return Trace("jsonl", tuple(steps))


def make_trace(
    kind: str, n: int, knobs: dict, seed: int = 0, item: int = 0, path: str | None = None
) -> Trace:
    """The trace of pool item ``item``: a generator's (seeded by ``seed`` and the item) or the JSONL file at
    ``path``."""
    if path:
        return read_jsonl(path, n)
    if kind not in GENERATORS:
        raise ValueError(f"trace.kind={kind!r}: one of {sorted(GENERATORS)} (or trace.path=<file.jsonl>)")
    try:
        return GENERATORS[kind](n, **knobs, seed=seed, item=item)
    except TypeError as err:
        raise ValueError(f"trace.kind={kind}: {err}") from None
