"""The hand-off between benchmarks and model adapters: an ordered list of spans.

A benchmark item becomes ``[prefix?, A_1, …, A_k, B, query]``; an adapter turns each span into
token embeddings and positions so any span can be prefilled alone at any position. Images (and
rendered PDF pages) travel as ``PIL.Image.Image`` parts inside a span; frames sampled from one video
travel as a :class:`Clip` (the Qwen families read it as their own video input, with temporal patches
and time positions; other families read its frames as images); a stretch of sound travels as an
:class:`Audio` (mono samples at a stated rate; the omni families read it with their audio tower).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from PIL import Image

Role = Literal["prefix", "A", "B", "query"]


@dataclass(frozen=True)
class Clip:
    """Consecutive frames of one video: ``frames`` (RGB images of one size) and the time of each in the
    source video, ``timestamps`` (seconds, increasing)."""

    frames: tuple[Image.Image, ...]
    timestamps: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.frames:
            raise ValueError("a clip needs at least one frame")
        if len(self.frames) != len(self.timestamps):
            raise ValueError(f"a clip has {len(self.frames)} frames but {len(self.timestamps)} timestamps")
        if any(not isinstance(f, Image.Image) for f in self.frames):
            raise TypeError("clip frames must be PIL images")
        if any(b <= a for a, b in zip(self.timestamps, self.timestamps[1:], strict=False)):
            raise ValueError(f"clip timestamps must increase, got {list(self.timestamps)}")
        if len({f.size for f in self.frames}) != 1:
            raise ValueError(f"clip frames differ in size: {sorted({f.size for f in self.frames})}")

    def __len__(self) -> int:
        return len(self.frames)


@dataclass(frozen=True, eq=False)
class Audio:
    """A stretch of mono sound: ``samples`` (float32, 1-D, in [-1, 1]) at ``sampling_rate`` Hz, and where it
    starts in its source (``start_s``, seconds). Compared by identity (the samples are an array)."""

    samples: np.ndarray
    sampling_rate: int
    start_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.samples, np.ndarray) or self.samples.ndim != 1:
            raise TypeError("audio samples must be a 1-D numpy array (mono)")
        if self.samples.size == 0:
            raise ValueError("an audio part needs at least one sample")
        if not isinstance(self.sampling_rate, int) or self.sampling_rate <= 0:
            raise ValueError(f"audio sampling_rate must be a positive int, got {self.sampling_rate!r}")

    @property
    def duration_s(self) -> float:
        return self.samples.size / self.sampling_rate


Part = str | Image.Image | Clip | Audio

ROLES: tuple[str, ...] = ("prefix", "A", "B", "query")


@dataclass(frozen=True)
class Span:
    """One contiguous piece of the context.

    ``role`` is prefix / A / B / query; several A spans are allowed (the antecedent may be many
    chunks, and orbit arms reorder them). ``parts`` interleave text and images in reading order.
    """

    role: Role
    parts: tuple[Part, ...]
    name: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"span role must be one of {ROLES}, got {self.role!r}")
        if isinstance(self.parts, (str, Image.Image)):
            raise TypeError("Span.parts must be a tuple of parts, not a single str/image")
        for p in self.parts:
            if not isinstance(p, (str, Image.Image, Clip, Audio)):
                raise TypeError(f"span part must be str, PIL.Image, Clip or Audio, got {type(p).__name__}")

    @property
    def n_images(self) -> int:
        return sum(isinstance(p, Image.Image) for p in self.parts)

    @property
    def n_frames(self) -> int:
        return sum(len(p) for p in self.parts if isinstance(p, Clip))

    def is_empty(self) -> bool:
        return all(isinstance(p, str) and p == "" for p in self.parts)


def validate_spans(spans: list[Span]) -> None:
    """Check the ``[prefix?, A*, B, query]`` shape; raise ValueError naming what is wrong."""
    roles = [s.role for s in spans]
    if roles.count("B") != 1:
        raise ValueError(f"an item needs exactly one B span, got roles {roles}")
    if roles.count("query") != 1 or roles[-1] != "query":
        raise ValueError(f"an item needs exactly one query span, last; got roles {roles}")
    if roles.count("prefix") > 1 or ("prefix" in roles and roles[0] != "prefix"):
        raise ValueError(f"the prefix span, if any, must come first and once; got roles {roles}")
    b = roles.index("B")
    if b != len(roles) - 2:
        raise ValueError(f"B must directly precede the query; got roles {roles}")
    if any(r != "A" for r in roles[1 if roles[0] == "prefix" else 0 : b]):
        raise ValueError(f"only A spans may sit between the prefix and B; got roles {roles}")
    if spans[b].is_empty():
        raise ValueError("the B span is empty: an item without a B chunk cannot be reused")
