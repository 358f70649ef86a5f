"""The binding task the toy model is trained on, and its seeded held-out items.

One world binds ``n_entries`` objects to colours and to locations:

    prefix  <bos> bind
    A       A: red_cup blue_key …          compound tokens, one (object, colour) binding each
    B       B: attic key barn cup …        (location, object) pairs, the same objects reordered, no colours
    query   Q2 attic → blue                two-hop: the colour of the object at a location (needs A and B)
            QC cup   → red                 control: the colour of an object (reads A only)
            QB barn  → cup                 control_b: the object at a location (reads B only)

An item is one world with one query (:mod:`kamera.toy.items`, in the harness's span hand-off).
Training (:mod:`kamera.toy.train`) packs several queries after B; items never do (the harness reads one
first answer token).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

KINDS: tuple[str, ...] = ("two_hop", "control", "control_b")
VARIANTS: tuple[str, ...] = ("text", "image")
DEFAULT_VARIANT = "image"  # what ``items`` draws and ``kamera.toy.model.load()`` (the registry's ``toy_binding``) loads
QUERY_WORD = {"two_hop": "Q2", "control": "QC", "control_b": "QB"}

COLOURS = (
    "red", "blue", "green", "yellow", "purple", "orange", "pink", "brown",
    "black", "white", "grey", "gold", "cyan", "olive", "navy", "teal",
)  # fmt: skip
OBJECTS = (
    "cup", "hat", "key", "box", "pen", "bag", "book", "lamp", "ball", "coin", "bell", "shoe",
    "fork", "ring", "drum", "kite", "vase", "sock", "comb", "leaf", "mug", "fan", "jar", "bowl",
)  # fmt: skip
LOCATIONS = (
    "attic", "barn", "bath", "bed", "cave", "deck", "den", "dock", "farm", "gate", "hall", "hut",
    "lab", "loft", "mill", "nook", "park", "pier", "pond", "porch", "shed", "shop", "yard", "zoo",
)  # fmt: skip
SPECIALS = ("<pad>", "<bos>", "<eos>", "<image>", "<vision_start>", "<vision_end>")
MARKERS = ("bind", "A:", "B:", *QUERY_WORD.values())
PREFIX = "<bos> bind"
HELDOUT = 0x6B616D  # mixed into every evaluation seed, so held-out worlds never share the training stream


@dataclass(frozen=True)
class TaskSpec:
    """The task's sizes: how many objects, colours and locations exist, and how many entries a world binds."""

    n_objects: int = 24
    n_colours: int = 16
    n_locations: int = 24
    n_entries: int = 16

    def __post_init__(self) -> None:
        for name, have, pool in (
            ("n_objects", self.n_objects, OBJECTS),
            ("n_colours", self.n_colours, COLOURS),
            ("n_locations", self.n_locations, LOCATIONS),
        ):
            if not 2 <= have <= len(pool):
                raise ValueError(f"{name} must be in 2..{len(pool)}, got {have}")
        if not 1 <= self.n_entries <= min(self.n_objects, self.n_locations):
            raise ValueError(
                f"n_entries must be in 1..min(n_objects, n_locations) = {min(self.n_objects, self.n_locations)}, "
                f"got {self.n_entries}"
            )

    @property
    def colours(self) -> tuple[str, ...]:
        return COLOURS[: self.n_colours]

    @property
    def objects(self) -> tuple[str, ...]:
        return OBJECTS[: self.n_objects]

    @property
    def locations(self) -> tuple[str, ...]:
        return LOCATIONS[: self.n_locations]

    def vocab(self) -> list[str]:
        """Every word of the task, one token each (specials first, so pad/bos/eos are ids 0-2)."""
        compounds = [compound(o, c) for o in self.objects for c in self.colours]
        return [*SPECIALS, *MARKERS, *self.colours, *self.objects, *self.locations, *compounds]

    def to_dict(self) -> dict:
        return asdict(self)


def compound(obj: str, colour: str) -> str:
    """The A token binding an object to a colour (like an image patch, one token carries the binding)."""
    return f"{colour}_{obj}"


@dataclass(frozen=True)
class World:
    """One sampled binding: A's (object, colour) entries in A order, and B's (location, object) pairs in B order."""

    spec: TaskSpec
    a: tuple[tuple[str, str], ...]
    b: tuple[tuple[str, str], ...]
    colour_of: dict[str, str] = field(compare=False)
    object_at: dict[str, str] = field(compare=False)

    @classmethod
    def sample(cls, spec: TaskSpec, rng: np.random.Generator, k: int | None = None) -> World:
        """Draw ``k`` (default ``spec.n_entries``) objects and locations without replacement, colours with
        replacement, and B's order independently."""
        k = spec.n_entries if k is None else k
        if not 1 <= k <= min(spec.n_objects, spec.n_locations):
            raise ValueError(f"a world binds 1..{min(spec.n_objects, spec.n_locations)} entries, got {k}")
        objs = [spec.objects[i] for i in rng.choice(spec.n_objects, k, replace=False)]
        cols = [spec.colours[i] for i in rng.integers(0, spec.n_colours, k)]
        locs = [spec.locations[i] for i in rng.choice(spec.n_locations, k, replace=False)]
        b_objs = [objs[i] for i in rng.permutation(k)]
        a = tuple(zip(objs, cols, strict=True))
        b = tuple(zip(locs, b_objs, strict=True))
        return cls(spec, a, b, dict(a), {loc: o for loc, o in b})

    def a_text(self) -> str:
        return " ".join(["A:", *(compound(o, c) for o, c in self.a)])

    def b_text(self) -> str:
        return " ".join(["B:", *(w for pair in self.b for w in pair)])

    def question(self, kind: str, rng: np.random.Generator) -> tuple[str, str]:
        """One query of ``kind`` about this world: (argument word, answer word)."""
        if kind == "control":
            obj = self.a[int(rng.integers(len(self.a)))][0]
            return obj, self.colour_of[obj]
        loc = self.b[int(rng.integers(len(self.b)))][0]
        if kind == "two_hop":
            return loc, self.colour_of[self.object_at[loc]]
        if kind == "control_b":
            return loc, self.object_at[loc]
        raise ValueError(f"query kind must be one of {KINDS}, got {kind!r}")
