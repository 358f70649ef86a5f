"""``videomme_window``: Video-MME (:mod:`kamera.data.videomme`) cut into cached video segments, the paper's Table 1
workload ("Cached video segments, n=25–32/model"): ``segments`` × ``frames_per_segment`` uniformly sampled
frames, grouped in order into segments; the ``foreign`` chunks ("frames from a different clip", App. D) are the
first segments of the next selected question on another video.

Choices (the paper does not give them): 11 segments of 2 frames with a window of k = 5 (the recall
stream needs 2k + 1 segments; k = 5 gives the τ steps of 0.2), 4 foreign segments (App. D's d ≤ 3
distractors and K = 3 replacements), frames scaled down to at most 448 × 448 pixels (``frame_pixels``;
about 256 visual tokens a frame on Qwen2.5-VL, so a 7-segment layout is ~3.6k tokens: see docs/window.md
for the memory this sets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from kamera.items.selection import Selection
from kamera.items.spans import Clip, Span
from kamera.items.window import WindowEntry, WindowItem
from kamera.knobs import is_int
from kamera.models.base import Adapter
from kamera.window.benches.base import Read, WindowBench


def shrink(image, pixels: int | None):
    """``image`` scaled down (aspect kept) to at most ``pixels`` pixels; as it is if smaller or ``pixels`` is None."""
    w, h = image.size
    if pixels is None or w * h <= pixels:
        return image
    scale = math.sqrt(pixels / (w * h))
    return image.resize((max(1, int(w * scale)), max(1, int(h * scale))), resample=3)  # 3 = bicubic


def _segments(
    spans: list[Span], n: int, per: int, pixels: int | None, what: str
) -> tuple[Span | None, list[Span], Span]:
    """(prefix, n segments, query) from a Video-MME item's ``[prefix?, A, B, query]``: its frames in order, cut
    into n :class:`~kamera.items.spans.Clip` parts of ``per`` frames (with their timestamps), one segment a span.

    A segment is a video clip as the loader's chunks are (a family that takes video reads it as its own video
    input, the others read its frames as images)."""
    clips = [p for s in spans if s.role in ("A", "B") for p in s.parts if not isinstance(p, str)]
    if not all(isinstance(c, Clip) for c in clips):
        raise ValueError(
            f"{what}: the loader's chunks hold {sorted({type(c).__name__ for c in clips})}, not video clips"
        )
    frames = [(shrink(f, pixels), t) for c in clips for f, t in zip(c.frames, c.timestamps, strict=True)]
    if len(frames) != n * per:
        raise ValueError(f"{what}: {len(frames)} frames decoded, {n} segments of {per} need {n * per}")
    segments = [
        Span("A", (Clip(*zip(*frames[j * per : (j + 1) * per], strict=True)),), f"segment{j}") for j in range(n)
    ]
    return (spans[0] if spans[0].role == "prefix" else None), segments, spans[-1]


def _video_build(item, other, opts: dict, adapter: Adapter) -> WindowItem:
    from kamera.data import MediaError

    n, per = opts["segments"], opts["frames_per_segment"]
    try:
        px = opts["frame_pixels"]
        prefix, history, query = _segments(item.spans(), n, per, px, f"Video-MME {item.item_id}")
        foreign = [] if other is None else _segments(other.spans(), n, per, px, f"Video-MME {other.item_id}")[1]
    except MediaError as err:
        raise ValueError(str(err)) from err
    return WindowItem(
        item.item_id,
        tuple(history),
        query,
        opts["window"],
        prefix,
        tuple(foreign[: opts["n_foreign"]]),
        tuple(item.choice_letters),
        item.gold_letter,
        {"video": item.cluster_key, "foreign_video": None if other is None else other.cluster_key},
    )


@dataclass(frozen=True)
class VideoWindowBench(WindowBench):
    """Video-MME questions over ``segments`` × ``frames_per_segment`` frames cut into segments."""

    def problems(self, model: str, opts: dict) -> list[str]:
        p = [
            f"bench.kwargs.{k}={opts[k]!r}: must be an integer >= {low}"
            for k, low in (("segments", 2), ("frames_per_segment", 1), ("window", 1), ("n_foreign", 0))
            if not is_int(opts[k], low)
        ]
        if opts["frame_pixels"] is not None and not is_int(opts["frame_pixels"], 28 * 28):
            p.append(
                f"bench.kwargs.frame_pixels={opts['frame_pixels']!r}: must be null (as decoded) or an integer >= 784"
            )
        if not p and opts["window"] >= opts["segments"]:
            p.append(f"bench.kwargs.window={opts['window']}: must be below segments ({opts['segments']})")
        if not p and opts["n_foreign"] > opts["segments"]:
            p.append(f"bench.kwargs.n_foreign={opts['n_foreign']}: at most segments ({opts['segments']})")
        tt = opts["task_types"]
        if tt is not None and not (isinstance(tt, list) and all(isinstance(t, str) for t in tt)):
            p.append(f"bench.kwargs.task_types={tt!r}: must be null or a list of Video-MME task types")
        return p

    def select(self, subsets: list[str], split: str, seed: int, n: int | None, opts: dict, read: Read) -> Selection:
        kwargs = {
            "n_frames": opts["segments"] * opts["frames_per_segment"],
            "a_chunks": 1,
            "task_types": opts["task_types"],
        }
        got = read(self.reads, kwargs)
        items, entries = got.items, []
        for j, it in enumerate(items):  # the foreign clip: the next selected question on another video
            other = next((o for o in items[j + 1 :] + items[:j] if o.cluster_key != it.cluster_key), None)
            entries.append(
                WindowEntry(it.item_id, it.subset, it.split, it.cluster_key, partial(_video_build, it, other, opts))
            )
        got.items = entries
        return got


SPEC = VideoWindowBench(
    "videomme_window",
    ("short", "medium", "long"),
    ("short", "medium", "long"),
    "test",
    {
        "segments": 11,
        "frames_per_segment": 2,
        "window": 5,
        "n_foreign": 4,
        "frame_pixels": 448 * 448,
        "task_types": None,
    },
    reads="videomme",
)
