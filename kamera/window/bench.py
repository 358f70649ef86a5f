"""Window benchmarks: where a window job's items come from (the second item shape of :mod:`kamera.job`).

A window benchmark selects window items deterministically, without a model, as light
:class:`WindowEntry` records (ids for the store, a builder the runner calls with the loaded model), so
selection, identity, preflight and status need no weights and a job holds one item's media at a time.

    window_toy        the toy window task (:mod:`kamera.toy.window_task`) for ``toy_window``: one purpose-built
                      stream per kind (subset), ``n_items`` items per kind; a probe runs only on the
                      stream built for it (the others are refused, with the reason, per item)
    window_synthetic  seeded noise-frame streams (:mod:`kamera.window.synthetic`) for the tiny random
                      families: identities and costs, not effects
    videomme_window   Video-MME (:mod:`kamera.data.videomme`) cut into cached video segments, the paper's
                      Table 1 workload ("Cached video segments, n=25–32/model"): ``segments`` ×
                      ``frames_per_segment`` uniformly sampled frames, grouped in order into segments; the
                      ``foreign`` chunks ("frames from a different clip", App. D) are the first segments of
                      the next selected question on another video

Choices (the paper does not give them): 11 segments of 2 frames with a window of k = 5 (the recall
stream needs 2k + 1 segments; k = 5 gives the τ steps of 0.2), 4 foreign segments (App. D's d ≤ 3
distractors and K = 3 replacements), frames scaled down to at most 448 × 448 pixels (``frame_pixels``;
about 256 visual tokens a frame on Qwen2.5-VL, so a 7-segment layout is ~3.6k tokens: see docs/window.md
for the memory this sets).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from kamera.items.selection import Selection
from kamera.items.spans import Clip, Span
from kamera.items.window import WindowEntry, WindowItem
from kamera.knobs import is_int
from kamera.models.base import Adapter
from kamera.toy.window_task import KINDS
from kamera.window.probes.base import WindowProbe

Read = Callable[[str, dict], Selection]  # (data benchmark, loader kwargs) → the job's selection of it


@dataclass(frozen=True)
class WindowBench:
    """A window benchmark: its subsets and split, its options (``bench.kwargs``) with their defaults, the
    directory it reads under ``paths.data`` (None: in memory). ``frames``: every chunk of its items is video frames
    (a text-only model cannot read it, said in preflight)."""

    frames: ClassVar[bool] = True
    name: str
    subsets: tuple[str, ...]
    default_subsets: tuple[str, ...]
    split: str
    options: dict
    dir_name: str | None = None

    def resolve(self, subset: str | None, split: str | None) -> tuple[list[str], str]:
        """(subsets, split) spelled out; ValueError naming the valid ones."""
        names = list(self.default_subsets) if subset is None else [s.strip() for s in subset.split(",")]
        bad = [s for s in names if s not in self.subsets]
        if bad or not names:
            raise ValueError(f"{self.name}: unknown subset(s) {bad}; valid: {list(self.subsets)}")
        if split not in (None, self.split):
            raise ValueError(f"{self.name}: unknown split {split!r}; valid: [{self.split!r}]")
        return names, self.split

    def kwargs(self, given: dict) -> dict:
        """The options with the defaults filled in; ValueError naming unknown ones."""
        bad = sorted(set(given) - set(self.options))
        if bad:
            raise ValueError(f"bench.kwargs {bad} are not options of {self.name}; it takes {sorted(self.options)}")
        return {**self.options, **given}

    def problems(self, model: str, opts: dict) -> list[str]:
        """Option values and model constraints, one line each (no data, no weights)."""
        return []

    def window(self, opts: dict) -> int | None:
        """The window of k chunks its items have (``window`` among the options; None where not a valid count)."""
        k = opts.get("window")
        return k if is_int(k, 1) else None

    def select(self, subsets: list[str], split: str, seed: int, n: int | None, opts: dict, read: Read) -> Selection:
        """The job's entries, chosen deterministically (``n`` None: the benchmark's default count); ``read(name,
        kwargs)`` is the job's selection of data benchmark ``name`` for a window benchmark cut from one."""
        raise NotImplementedError

    def refuses(self, probe: WindowProbe, entry: WindowEntry) -> str | None:
        """Why ``probe`` cannot run on ``entry`` (it is not the stream the probe reads), or None."""
        return None


# ----- the toy window task ---------------------------------------------------------------------------
# The toy task's stream each probe reads (kamera/toy/window_task.py builds one stream per kind).
TOY_READS = {"recall": "recall", "forks": "recall", "deep_half": "recall", "revert": "recall",
             "disposability": "recall", "leading": "recall", "survivor": "survivor", "reorder": "reorder",
             "divergent": "divergent", "refresh": "refresh", "excess": "excess"}
TOY_STATES = {"reorder": 3, "divergent": 3, "refresh": 4}  # K of the stream by default (the probes' defaults)


def _toy_spec():
    from kamera.toy.model import WEIGHTS, read_spec

    return read_spec(WEIGHTS / "window")[1]


def _toy_build(kind: str, i: int, seed: int, n_states: int, adapter: Adapter) -> WindowItem:
    from kamera.toy.window_task import window_item

    if getattr(adapter, "variant", None) != "window":
        raise ValueError(f"window_toy items come from the toy window model's task; {adapter.name} is not toy_window")
    return window_item(adapter.task, kind, i, seed, n_states)


@dataclass(frozen=True)
class ToyWindowBench(WindowBench):
    """The toy window task. ``n_states``: K of the reorder / divergent / refresh streams (null: 3, 3, 4)."""

    frames: ClassVar[bool] = False  # the toy window model's own streams

    def problems(self, model: str, opts: dict) -> list[str]:
        p = [] if model == "toy_window" else [f"bench={self.name} draws its items from the toy window model's task: "
                                              f"model=toy_window, not {model}"]
        n = opts["n_states"]
        if n is not None and not (is_int(n, 1) and n <= _toy_spec().max_states):
            p.append(f"bench.kwargs.n_states={n!r}: must be null or an integer in 1..{_toy_spec().max_states}")
        return p

    def window(self, opts: dict) -> int | None:
        """The toy window model's own k (its task spec)."""
        return _toy_spec().window

    def select(self, subsets: list[str], split: str, seed: int, n: int | None, opts: dict, read: Read) -> Selection:
        from kamera.toy.window_task import item_id

        kinds, spec, per_kind, entries = subsets, _toy_spec(), 64 if n is None else n, []
        for kind in kinds:
            states = (opts["n_states"] or TOY_STATES[kind]) if kind in TOY_STATES else 3
            entries += [WindowEntry(item_id(kind, seed, i), kind, split, item_id(kind, seed, i),
                                    partial(_toy_build, kind, i, seed, states),
                                    {"kind": kind, "n_states": states, "window": spec.window})
                        for i in range(per_kind)]
        return Selection(entries, n_requested=n, report=f"{per_kind} items of each toy window stream ({', '.join(kinds)})")

    def refuses(self, probe: WindowProbe, entry: WindowEntry) -> str | None:
        kind, stream = entry.meta["kind"], TOY_READS.get(probe.name)
        if stream != kind:
            return (f"{probe.name} reads the toy task's {stream} stream; {entry.item_id} is a {kind} stream"
                    if stream else f"the toy window task has no stream built for {probe.name}")
        k = getattr(probe, "n_chunks", None)
        if k is not None and k != entry.meta["n_states"]:
            return f"{probe.name} with n_chunks={k} needs a stream of {k} states; {entry.item_id} has {entry.meta['n_states']}"
        window = entry.meta["window"]
        if probe.name == "survivor" and probe.survivor % window != window - 2:
            return f"the toy survivor stream puts the survivor at window slot {window - 2}, not {probe.survivor}"
        return None


# ----- synthetic noise-frame streams -----------------------------------------------------------------
def _synthetic_build(i: int, seed: int, opts: dict, adapter: Adapter) -> WindowItem:
    from kamera.window.synthetic import window_item

    return window_item(adapter, i, opts["window"], opts["n_history"], opts["n_foreign"], seed, opts["image_size"])


@dataclass(frozen=True)
class SyntheticWindowBench(WindowBench):
    """Seeded noise frames with captions (text captions alone for text-only families)."""

    def problems(self, model: str, opts: dict) -> list[str]:
        p = [f"bench.kwargs.{k}={opts[k]!r}: must be an integer >= {low}"
             for k, low in (("window", 1), ("n_foreign", 0), ("image_size", 28)) if not is_int(opts[k], low)]
        if opts["n_history"] is not None and not is_int(opts["n_history"], 2):
            p.append(f"bench.kwargs.n_history={opts['n_history']!r}: must be null (2·window + 1) or an integer >= 2")
        return p

    def select(self, subsets: list[str], split: str, seed: int, n: int | None, opts: dict, read: Read) -> Selection:
        from kamera.window.synthetic import item_id

        (subset,) = subsets
        count = 8 if n is None else n
        entries = [WindowEntry(item_id(seed, i), subset, split, item_id(seed, i),
                               partial(_synthetic_build, i, seed, opts)) for i in range(count)]
        return Selection(entries, n_requested=n, report=f"{count} synthetic window streams")


# ----- Video-MME segments ----------------------------------------------------------------------------
def shrink(image, pixels: int | None):
    """``image`` scaled down (aspect kept) to at most ``pixels`` pixels; as it is if smaller or ``pixels`` is None."""
    w, h = image.size
    if pixels is None or w * h <= pixels:
        return image
    scale = math.sqrt(pixels / (w * h))
    return image.resize((max(1, int(w * scale)), max(1, int(h * scale))), resample=3)  # 3 = bicubic


def _segments(spans: list[Span], n: int, per: int, pixels: int | None, what: str) -> tuple[Span | None, list[Span], Span]:
    """(prefix, n segments, query) from a Video-MME item's ``[prefix?, A, B, query]``: its frames in order, cut
    into n :class:`~kamera.items.spans.Clip` parts of ``per`` frames (with their timestamps), one segment a span.

    A segment is a video clip as the loader's chunks are (a family that takes video reads it as its own video
    input, the others read its frames as images)."""
    clips = [p for s in spans if s.role in ("A", "B") for p in s.parts if not isinstance(p, str)]
    if not all(isinstance(c, Clip) for c in clips):
        raise ValueError(f"{what}: the loader's chunks hold {sorted({type(c).__name__ for c in clips})}, not video clips")
    frames = [(shrink(f, pixels), t) for c in clips for f, t in zip(c.frames, c.timestamps, strict=True)]
    if len(frames) != n * per:
        raise ValueError(f"{what}: {len(frames)} frames decoded, {n} segments of {per} need {n * per}")
    segments = [Span("A", (Clip(*zip(*frames[j * per : (j + 1) * per], strict=True)),), f"segment{j}") for j in range(n)]
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
    return WindowItem(item.item_id, tuple(history), query, opts["window"], prefix, tuple(foreign[: opts["n_foreign"]]),
                      tuple(item.choice_letters), item.gold_letter,
                      {"video": item.cluster_key, "foreign_video": None if other is None else other.cluster_key})


@dataclass(frozen=True)
class VideoWindowBench(WindowBench):
    """Video-MME questions over ``segments`` × ``frames_per_segment`` frames cut into segments."""

    def problems(self, model: str, opts: dict) -> list[str]:
        p = [f"bench.kwargs.{k}={opts[k]!r}: must be an integer >= {low}"
             for k, low in (("segments", 2), ("frames_per_segment", 1), ("window", 1), ("n_foreign", 0))
             if not is_int(opts[k], low)]
        if opts["frame_pixels"] is not None and not is_int(opts["frame_pixels"], 28 * 28):
            p.append(f"bench.kwargs.frame_pixels={opts['frame_pixels']!r}: must be null (as decoded) or an integer >= 784")
        if not p and opts["window"] >= opts["segments"]:
            p.append(f"bench.kwargs.window={opts['window']}: must be below segments ({opts['segments']})")
        if not p and opts["n_foreign"] > opts["segments"]:
            p.append(f"bench.kwargs.n_foreign={opts['n_foreign']}: at most segments ({opts['segments']})")
        tt = opts["task_types"]
        if tt is not None and not (isinstance(tt, list) and all(isinstance(t, str) for t in tt)):
            p.append(f"bench.kwargs.task_types={tt!r}: must be null or a list of Video-MME task types")
        return p

    def select(self, subsets: list[str], split: str, seed: int, n: int | None, opts: dict, read: Read) -> Selection:
        kwargs = {"n_frames": opts["segments"] * opts["frames_per_segment"], "a_chunks": 1,
                  "task_types": opts["task_types"]}
        got = read("videomme", kwargs)
        items, entries = got.items, []
        for j, it in enumerate(items):  # the foreign clip: the next selected question on another video
            other = next((o for o in items[j + 1 :] + items[:j] if o.cluster_key != it.cluster_key), None)
            entries.append(WindowEntry(it.item_id, it.subset, it.split, it.cluster_key,
                                       partial(_video_build, it, other, opts)))
        got.items = entries
        return got


WINDOW_BENCHES: dict[str, WindowBench] = {b.name: b for b in (
    ToyWindowBench("window_toy", KINDS, KINDS, "heldout", {"n_states": None}),
    SyntheticWindowBench("window_synthetic", ("synthetic",), ("synthetic",), "synthetic",
                         {"window": 5, "n_history": None, "n_foreign": 4, "image_size": 112}),
    VideoWindowBench("videomme_window", ("short", "medium", "long"), ("short", "medium", "long"), "test",
                     {"segments": 11, "frames_per_segment": 2, "window": 5, "n_foreign": 4, "frame_pixels": 448 * 448,
                      "task_types": None},
                     dir_name="Video-MME"),
)}
