"""The toy window task: a stream of state and scene chunks whose meaning depends on the window before them.

The binding task of :mod:`kamera.toy.task` cut into a stream of chunks, as a windowed agent sees it:

    state   A: red_cup blue_key …      ``per_state`` (object, colour) bindings, one compound token each
    scene   B: attic cup barn key …    (location, object) pairs; no colours
    query   Q2 attic → the colour of the object at a location of the scene

A scene's objects are coloured only by the state chunks in front of it in the window, so what a
scene chunk means (its conditioned KV) depends on which states the window holds: a chain of
bindings query → location (scene) → object → colour (a state before it). Within any window the
generators below bind each object at most once, and a state chunk that arrives later in the stream
re-binds a group of objects to new colours (the world changed), so turning the window over changes
the answer for the objects whose binding chunk was replaced. Training (:mod:`kamera.toy.train`,
``--variant window``) draws random windows of such streams; the items below are the probes' streams,
returned as :class:`~kamera.items.window.WindowItem` with the answer a function of the window.

Item streams (k = ``WindowSpec.window``; ids as in :class:`WindowItem`):
- ``recall``: states s₁…s_k (groups O₁…O_k), the scene x over all of them, then s′₁…s′_k re-binding
  O₁…O_k to new colours: history ``[s₁ … s_k, x, s′₁ … s′_k]`` (the recall sweep's stream; also the
  deep-half, revert, disposability and fork probes' window ``[s₁ … s_k] → x``).
- ``survivor``: ``[e, s₁ … s_{k−3}, S, t₁, t₂]``: e binds objects S does not show, S's objects are
  bound by s₁ … s_{k−3}, t₁ and t₂ (the chunk the slide admits) bind others: S is window slot k − 2.
- ``reorder``: states s₁…s_K and a scene over all their objects (``n_states`` = K).
- ``divergent`` / ``refresh``: states s₁…s_K, a scene over their objects, and foreign states
  re-binding each group to other colours (another clip of the same objects).
- ``excess``: X, Y, a scene over their objects, and foreign distractor states binding other objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from kamera.items.spans import Span
from kamera.items.window import WindowItem
from kamera.toy.task import HELDOUT, PREFIX, TaskSpec, compound

KINDS: tuple[str, ...] = ("recall", "survivor", "reorder", "divergent", "refresh", "excess")
STATE, SCENE = "state", "scene"


@dataclass(frozen=True)
class WindowSpec(TaskSpec):
    """The binding task's sizes plus the stream's: bindings per state chunk, the window k, and the most
    state chunks training puts after the scene. ``n_entries`` caps the bindings in front of a scene."""

    n_entries: int = 24
    per_state: int = 4
    window: int = 5
    max_after: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.per_state < 1 or self.n_entries % self.per_state:
            raise ValueError(f"per_state must be ≥ 1 and divide n_entries ({self.n_entries}), got {self.per_state}")
        if not 1 <= self.window * self.per_state <= self.n_entries:
            raise ValueError(
                f"a window of {self.window} states binds {self.window * self.per_state} objects; "
                f"n_entries allows {self.n_entries}"
            )
        if self.max_after < 0:
            raise ValueError(f"max_after must be ≥ 0, got {self.max_after}")

    @property
    def max_states(self) -> int:
        """The most state chunks in front of a scene."""
        return self.n_entries // self.per_state


def state(bindings: Sequence[tuple[str, str]], name: str = STATE) -> Span:
    """A state chunk: ``A:`` and one compound token per (object, colour)."""
    words = " ".join(["A:", *(compound(o, c) for o, c in bindings)])
    return Span("A", (words,), name, {"kind": STATE, "colour_of": dict(bindings)})


def scene(pairs: Sequence[tuple[str, str]], name: str = SCENE) -> Span:
    """A scene chunk: ``B:`` and (location, object) pairs."""
    words = " ".join(["B:", *(w for pair in pairs for w in pair)])
    return Span("A", (words,), name, {"kind": SCENE, "object_at": dict(pairs)})


def answer(chunks: Sequence[Span], location: str, window: tuple[int, ...]) -> str | None:
    """The two-hop answer in ``window`` (chunk ids into ``chunks``, in order): the colour the last state in
    front of the scene showing ``location`` gives its object; None if no scene shows it or nothing binds it."""
    spans = [chunks[i] for i in window]
    at = next((i for i, s in enumerate(spans) if s.meta.get("kind") == SCENE and location in s.meta["object_at"]), None)
    if at is None:
        return None
    obj = spans[at].meta["object_at"][location]
    for s in reversed(spans[:at]):
        if s.meta.get("kind") == STATE and obj in s.meta["colour_of"]:
            return s.meta["colour_of"][obj]
    return None


class Stream:
    """Seeded draws of objects, colours and locations for one item (objects and locations never repeat)."""

    def __init__(self, spec: WindowSpec, rng: np.random.Generator) -> None:
        self.spec, self.rng = spec, rng
        self.objects = [spec.objects[i] for i in rng.permutation(spec.n_objects)]
        self.locations = [spec.locations[i] for i in rng.permutation(spec.n_locations)]

    def take_objects(self, n: int) -> list[str]:
        if n > len(self.objects):
            raise ValueError(f"the stream needs {n} more objects; the task has {self.spec.n_objects} in all")
        out, self.objects = self.objects[:n], self.objects[n:]
        return out

    def colours(self, n: int, avoid: Sequence[str] | None = None) -> list[str]:
        """n colours drawn with replacement; with ``avoid``, colour i differs from avoid[i]."""
        out = []
        for i in range(n):
            while True:
                c = self.spec.colours[int(self.rng.integers(self.spec.n_colours))]
                if avoid is None or c != avoid[i]:
                    break
            out.append(c)
        return out

    def states(self, n: int) -> list[list[tuple[str, str]]]:
        """n state chunks' bindings, ``per_state`` fresh objects each."""
        k = self.spec.per_state
        objs = self.take_objects(n * k)
        cols = self.colours(n * k)
        return [list(zip(objs[i * k : (i + 1) * k], cols[i * k : (i + 1) * k], strict=True)) for i in range(n)]

    def rebind(self, groups: Sequence[Sequence[tuple[str, str]]]) -> list[list[tuple[str, str]]]:
        """The same objects as ``groups``, each to a different colour."""
        return [list(zip([o for o, _ in g], self.colours(len(g), [c for _, c in g]), strict=True)) for g in groups]

    def scene(self, groups: Sequence[Sequence[tuple[str, str]]]) -> list[tuple[str, str]]:
        """A scene over every object of ``groups``, at fresh locations, in random order."""
        objs = [o for g in groups for o, _ in g]
        objs = [objs[i] for i in self.rng.permutation(len(objs))]
        locs, self.locations = self.locations[: len(objs)], self.locations[len(objs) :]
        return list(zip(locs, objs, strict=True))


def _stream(spec: WindowSpec, kind: str, s: Stream,
            n_states: int) -> tuple[list[Span], list[Span], list[tuple[str, str]]]:
    """(history, foreign, the scene's pairs) of one item of ``kind``."""
    if kind == "recall":
        old = s.states(spec.window)
        x = s.scene(old)
        return [*map(state, old), scene(x), *map(state, s.rebind(old))], [], x
    if kind == "survivor":
        if spec.window < 4:
            raise ValueError(f"the survivor stream needs a window of ≥ 4 chunks, the spec has {spec.window}")
        e, *held = s.states(spec.window - 2)
        after = s.states(2)
        x = s.scene(held)
        return [state(e), *map(state, held), scene(x), *map(state, after)], [], x
    if not 1 <= n_states <= spec.max_states:
        raise ValueError(f"n_states must be in 1..{spec.max_states}, got {n_states}")
    if kind in ("reorder", "divergent", "refresh"):
        groups = s.states(n_states)
        x = s.scene(groups)
        foreign = [] if kind == "reorder" else [state(g, "foreign") for g in s.rebind(groups)]
        return [*map(state, groups), scene(x)], foreign, x
    if kind == "excess":
        groups = s.states(2)
        x = s.scene(groups)
        distractors = s.states(min(3, spec.max_states - 2))
        return [*map(state, groups), scene(x)], [state(g, "distractor") for g in distractors], x
    raise ValueError(f"window item kind must be one of {KINDS}, got {kind!r}")


def window_item(spec: WindowSpec, kind: str, i: int, seed: int = 0, n_states: int = 3) -> WindowItem:
    """Held-out window item i of ``kind`` (``n_states`` = K for reorder / divergent / refresh); it depends
    only on (seed, kind, n_states, i). The query asks the colour at one of the scene's locations."""
    if kind not in KINDS:
        raise ValueError(f"window item kind must be one of {KINDS}, got {kind!r}")
    rng = np.random.default_rng([HELDOUT, seed, 100 + KINDS.index(kind), n_states, i])
    history, foreign, pairs = _stream(spec, kind, Stream(spec, rng), n_states)
    location = pairs[int(rng.integers(len(pairs)))][0]
    chunks = (*history, *foreign)
    return WindowItem(
        item_id=item_id(kind, seed, i),
        history=tuple(history),
        query=Span("query", (f"Q2 {location}",), "two_hop"),
        window=spec.window,
        prefix=Span("prefix", (PREFIX,), "prefix"),
        foreign=tuple(foreign),
        choices=spec.colours,
        gold=partial(answer, chunks, location),
        meta={"kind": kind, "location": location, "n_states": n_states},
    )


def item_id(kind: str, seed: int, i: int) -> str:
    """The id of held-out window item i of ``kind``."""
    return f"{kind}-{seed}-{i}"


def window_items(spec: WindowSpec, kind: str, n: int, seed: int = 0, n_states: int = 3) -> list[WindowItem]:
    """``n`` held-out window items of ``kind`` (:func:`window_item` 0 … n − 1)."""
    if n < 0:
        raise ValueError(f"n must be ≥ 0, got {n}")
    return [window_item(spec, kind, i, seed, n_states) for i in range(n)]
