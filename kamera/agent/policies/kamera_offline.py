"""``kamera_offline``: ``kamera`` on the order sequence that prefills the fewest tokens over the whole known trace:
the offline optimum of placement, a bound for the online scheduler (``kamera_placement``), for small k.

Before the first step it searches every order of every step's set (depth first, pruned by the best total so far,
each step's orders tried cheapest first) on a symbolic replay of the menu: the store's keys only, unbounded, a
step's cost the tokens of its ``form`` chunks plus the canonical of a leading chunk the store lacks. Executed like
every policy, its rows also count what the symbolic cost leaves out (the canonicals its patches are applied to, a
budget's evictions), so its tokens may exceed the bound it found; ``limit`` caps the order sequences (Π k_t! over
the steps) it will search: a longer trace is refused before any weights load (``trace.knobs.window=3
trace.knobs.steps=6`` is 6⁶ = 46,656)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import permutations
from types import SimpleNamespace

from kamera.agent.policies.base import register
from kamera.agent.policies.kamera import Kamera
from kamera.agent.session import Session
from kamera.agent.store import canonical_key, orbit_key, patch_key
from kamera.agent.trace import Trace
from kamera.errors import ItemError


@register
@dataclass
class KameraOffline(Kamera):
    """The menu of ``kamera`` on the offline-optimal order of each window's set."""

    name = "kamera_offline"
    limit: int = 100_000

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"{self.name}: limit={self.limit!r}: an integer >= 1 (order sequences searched)")

    def sequences(self, sizes: list[int]) -> int:
        return math.prod(math.factorial(k) for k in sizes)

    def refusal(self, sizes: list[int]) -> str | None:
        n = self.sequences(sizes)
        if n <= self.limit:
            return None
        return (
            f"{self.name}: {len(sizes)} steps of up to {max(sizes)} chunks have {n:,} order sequences, above "
            f"limit={self.limit:,} (a small trace: trace.knobs.window=3 trace.knobs.steps=6)"
        )

    def problems(self, window: int | None = None, steps: int | None = None) -> list[str]:
        why = None if window is None or steps is None else self.refusal([window] * steps)
        return [why] if why else []

    def begin(self, s: Session, trace: Trace) -> None:
        why = self.refusal([len(w) for w in trace.steps])
        if why:  # a JSONL trace (a generator's is refused in preflight): this pool fails with the reason
            raise ItemError(why)
        s.plan = self.search(s, trace)

    def order(self, s: Session, window: tuple[int, ...]) -> tuple[int, ...]:
        return s.plan[s.step]

    # ----- the symbolic search ------------------------------------------------------------------------
    def advance(self, sim: SimpleNamespace, order: tuple[int, ...]) -> int:
        """Apply one step's order to the symbolic state; its tokens."""
        acts = [self.action(sim, j, c, tuple(sim.digests[a] for a in order[:j])) for j, c in enumerate(order)]
        tokens = 0
        for j, (c, act) in enumerate(zip(order, acts, strict=True)):
            d, ants = sim.digests[c], tuple(sim.digests[a] for a in order[:j])
            if act == "leading" and canonical_key(d) not in sim.store:
                tokens += sim.n_tokens(c)
                sim.store.add(canonical_key(d))
            elif act == "form":
                tokens += sim.n_tokens(c)
                sim.store.add(patch_key(d, ants))
                if self.orbit:
                    sim.store.add(orbit_key(d, ants))
        sim.live = {c: (tuple(sim.digests[a] for a in order[:j]), None) for j, c in enumerate(order)}
        return tokens

    def search(self, s: Session, trace: Trace) -> list[tuple[int, ...]]:
        sim = SimpleNamespace(digests=s.digests, n_tokens=s.n_tokens, store=set(), live={})
        best: list = [math.inf, None]

        def dfs(t: int, cost: int, path: list[tuple[int, ...]]) -> None:
            if cost >= best[0]:
                return
            if t == len(trace.steps):
                best[:] = [cost, list(path)]
                return
            tried = []
            for order in permutations(trace.steps[t]):
                saved = (set(sim.store), dict(sim.live))
                tried.append((self.advance(sim, order), order))
                sim.store, sim.live = saved
            for step_cost, order in sorted(tried, key=lambda x: x[0]):
                saved = (set(sim.store), dict(sim.live))
                self.advance(sim, order)
                dfs(t + 1, cost + step_cost, [*path, order])
                sim.store, sim.live = saved

        dfs(0, 0, [])
        return best[1]
