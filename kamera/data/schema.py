"""One item schema for every benchmark, and its hand-off to the adapters as ``kamera.items.spans.Span`` lists.

An item's context is an ordered list of :class:`Segment`s, each a piece of text and/or one lazy
:class:`MediaRef`, tagged with its role:

- ``prefix``: the benchmark's instruction text that precedes the context (the prefix span);
- ``A``: the antecedent, in chunks (``Segment.chunk``); each chunk becomes its own A span;
- ``filler``: distractor chunks a variant inserts among the A chunks (A spans named ``"filler"``);
- ``B``: the one reused chunk (exactly one B span);
- ``after``: source context that follows B. It cannot be reused as part of B and does not precede
  it, so it opens the query span, before the rendered question. Loaders document when this happens.

The query span holds ``after`` context, then the prompt rendered by the benchmark's
:class:`PromptTemplate` (question, choices with letters, image options as image parts, post-prompt).
Concatenating every span's parts reproduces the benchmark's reference prompt with images in place
of its placeholders (``render_text`` checks this in the tests).
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from PIL import Image

from kamera.data import media as _media
from kamera.data.errors import ItemError
from kamera.items.spans import Audio, Clip, Span, validate_spans

IMAGE_TOKEN = "<image>"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

MediaKind = Literal["image", "video_frame", "pdf_page", "audio"]
SegmentRole = Literal["prefix", "A", "filler", "B", "after"]


@dataclass(frozen=True)
class MediaRef:
    """A lazy reference to one picture (an image file or encoded bytes, one video frame, one PDF page) or one
    stretch of audio (a file's or video's audio track, or encoded bytes, from ``timestamp_s`` for ``duration_s``).

    Nothing is decoded until :meth:`load`; ``source_key`` names where the media came from in the source
    row (e.g. ``images_list[3]``, ``frame[120]``, ``page[5]``) and is what the once-only check counts.
    """

    kind: MediaKind
    source_key: str
    path: Path | None = None
    data: bytes | None = field(default=None, repr=False)
    frame_index: int | None = None
    frame_group: tuple[int, ...] = ()
    timestamp_s: float | None = None
    page: int | None = None
    dpi: int = _media.PDF_DPI
    cache_dir: Path | None = None
    duration_s: float | None = None

    def load(self) -> Image.Image | Audio:
        """Decode to an RGB PIL image (cached on disk for video frames and PDF pages), or audio to mono samples at
        :data:`~kamera.data.media.AUDIO_RATE`."""
        if self.kind == "audio":
            start = float(self.timestamp_s or 0.0)
            source = self.data if self.data is not None else self._need(self.path, "path")
            samples = _media.read_audio(source, self.source_key if self.data is not None else str(self.path),
                                        start_s=start, duration_s=self.duration_s)
            return Audio(samples, _media.AUDIO_RATE, start)
        if self.kind == "image":
            if self.data is not None:
                return _media.open_image_bytes(self.data, self.source_key)
            return _media.open_image_file(self._need(self.path, "path"))
        cache = self.cache_dir or _media.cache_root(None)
        if self.kind == "video_frame":
            index = self._need(self.frame_index, "frame_index")
            return _media.video_frame(self._need(self.path, "path"), index, self.frame_group, cache)
        return _media.pdf_page(self._need(self.path, "path"), self._need(self.page, "page"), self.dpi, cache)

    def _need(self, value: Any, name: str) -> Any:
        if value is None:
            raise ValueError(f"MediaRef {self.source_key!r} of kind {self.kind} has no {name}")
        return value


@dataclass(frozen=True)
class Segment:
    """One ordered piece of an item's context: text, then optionally one media reference."""

    role: SegmentRole
    chunk: int = 0
    text: str = ""
    media: MediaRef | None = None


@dataclass(frozen=True)
class Unit:
    """Text leading into one media item (or text alone): the grain loaders cut contexts into."""

    text: str = ""
    media: MediaRef | None = None


@dataclass(frozen=True)
class PromptTemplate:
    """A benchmark's prompt, as its reference evaluation builds it, recorded once per benchmark.

    ``prefix`` is the instruction before the context (may hold ``{instruction}``); the query is
    ``query_lead + question + choices_lead + choice lines + post``. ``question`` and ``choice`` are
    patterns with ``{question}`` / ``{letter}`` and ``{choice}`` (an image option puts its image there).
    """

    source: str
    prefix: str = ""
    query_lead: str = ""
    question: str = "{question}"
    choices_lead: str = ""
    choice: str = "\n{letter}. {choice}"
    post: str = ""

    def query_parts(
        self,
        question: str,
        question_media: Sequence[MediaRef],
        choices: Sequence[str] | None,
        choice_media: Sequence[MediaRef] | None,
    ) -> list[str | MediaRef]:
        """The query's parts in order; ``<image>`` in the question is replaced by its media in order."""
        parts: list[str | MediaRef] = [self.query_lead]
        pieces = self.question.replace("{question}", question).split(IMAGE_TOKEN)
        if len(pieces) - 1 != len(question_media):
            raise ItemError(f"question has {len(pieces) - 1} {IMAGE_TOKEN} for {len(question_media)} images")
        for piece, ref in zip(pieces, [*question_media, None], strict=True):
            parts.append(piece)
            if ref is not None:
                parts.append(ref)
        options: list[str | MediaRef] = list(choice_media or choices or [])
        if options:
            parts.append(self.choices_lead)
            before, _, after = self.choice.partition("{choice}")
            for letter, option in zip(LETTERS, options, strict=False):
                parts += [before.replace("{letter}", letter), option, after.replace("{letter}", letter)]
        parts.append(self.post)
        return parts


def group_evenly(n: int, k: int | None) -> list[range]:
    """Split ``range(n)`` into ``k`` contiguous near-equal groups (``None``: one group per index)."""
    if n == 0:
        return []
    k = n if k is None else k
    if k < 1:
        raise ValueError(f"a_chunks must be >= 1, got {k}")
    k = min(k, n)
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(k)]


def split_placeholders(text: str, token: str, n_media: int, what: str) -> list[str]:
    """Split ``text`` at ``token``; ItemError unless the placeholder count equals the media count."""
    pieces = text.split(token)
    if len(pieces) - 1 != n_media:
        raise ItemError(f"{what} has {len(pieces) - 1} {token!r} placeholders for {n_media} media")
    return pieces


def layout(
    prefix: str,
    a_chunks: Sequence[tuple[Sequence[Unit], bool]],
    b: Sequence[Unit],
    after: Sequence[Unit] = (),
) -> list[Segment]:
    """Segments for ``[prefix, A chunks (each flagged filler or not), B, after]``."""
    segs = [Segment("prefix", 0, prefix)] if prefix else []
    for k, (units, is_filler) in enumerate(a_chunks):
        role: SegmentRole = "filler" if is_filler else "A"
        segs += [Segment(role, k, u.text, u.media) for u in units]
    segs += [Segment("B", len(a_chunks), u.text, u.media) for u in b]
    segs += [Segment("after", len(a_chunks) + 1, u.text, u.media) for u in after if u.text or u.media]
    return segs


def interleaved_layout(
    prefix: str, units: Sequence[Unit], b_start: int, b_end: int, a_chunks: int | None, after_text: str = ""
) -> list[Segment]:
    """Segments for an interleaved context cut at unit boundaries: ``units[b_start:b_end]`` are B, the
    units before it are A in ``a_chunks`` contiguous chunks, the rest (and ``after_text``) come after."""
    if not 0 <= b_start < b_end <= len(units):
        raise ItemError(f"no B chunk: B range [{b_start}, {b_end}) over {len(units)} context units")
    groups = [([units[i] for i in g], False) for g in group_evenly(b_start, a_chunks)]
    return layout(prefix, groups, units[b_start:b_end], [*units[b_end:], Unit(after_text)])


ORDERS = ("forward", "reversed")


def evidence_layout(
    prefix: str,
    first: tuple[int, Sequence[Unit]],
    second: tuple[int, Sequence[Unit]],
    fillers: Sequence[tuple[int, Sequence[Unit]]] = (),
    order: str = "forward",
) -> list[Segment]:
    """A/B for two-evidence items (pages, paragraphs), each given as (source position, units).

    ``forward``: A = first evidence, B = second; ``reversed`` swaps them. Filler chunks join the A side,
    sorted with the A evidence by source position, and become A spans named ``"filler"``.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    a, b = (first, second) if order == "forward" else (second, first)
    a_side = sorted(
        [(a[0], 0, a[1]), *((pos, 1, units) for pos, units in fillers)], key=lambda c: (c[0], c[1])
    )
    return layout(prefix, [(units, bool(flag)) for _, flag, units in a_side], b[1])


def variant_suffix(order: str, n_distractors: int) -> str:
    """The item-id suffix of a two-evidence variant (``""`` for the plain forward item)."""
    parts = ["rev" if order == "reversed" else "", f"d{n_distractors}" if n_distractors else ""]
    return "+".join(p for p in parts if p)


def pick_distractors(candidates: Sequence[int], n: int, key: str) -> list[int]:
    """``n`` candidates chosen deterministically from the item's id (the same on every load)."""
    if n < 0:
        raise ValueError(f"n_distractors must be >= 0, got {n}")
    if n > len(candidates):
        raise ItemError(f"{n} distractors asked for, only {len(candidates)} candidates")
    rng = random.Random(hashlib.sha256(key.encode()).hexdigest())
    return sorted(rng.sample(list(candidates), n))


def _load_parts(parts: Sequence[str | MediaRef]) -> tuple:
    """Decode media parts: images as images, each run of consecutive frames of one video as a Clip."""
    out: list = []
    run: list[MediaRef] = []

    def flush() -> None:
        if run:
            out.append(Clip(tuple(r.load() for r in run), tuple(float(r.timestamp_s or 0.0) for r in run)))
            run.clear()

    for p in parts:
        if isinstance(p, MediaRef) and p.kind == "video_frame" and (not run or run[-1].path == p.path):
            run.append(p)
            continue
        flush()
        if isinstance(p, MediaRef) and p.kind == "video_frame":
            run.append(p)
        else:
            out.append(p.load() if isinstance(p, MediaRef) else p)
    flush()
    return tuple(out)


@dataclass
class ChunkedItem:
    """One benchmark item cut into prefix / A / B / query, with its gold answer and scorer.

    ``gold`` is the answer in the benchmark's own form (option index, letter, option text, typed string,
    list); ``gold_norm`` the normalised form the scorer compares against (a letter for multiple choice).
    ``choices`` hold option texts without letters; ``choice_media`` image options (query only).
    """

    benchmark: str
    subset: str
    split: str
    item_id: str
    segments: list[Segment]
    question: str
    choices: list[str] | None
    choice_media: list[MediaRef] | None
    gold: Any
    gold_norm: Any
    answer_format: str
    scorer: str
    cluster_key: str
    prompt: PromptTemplate
    question_media: list[MediaRef] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_choices(self) -> int:
        """Number of answer options (text or image); 0 for open questions."""
        return len(self.choice_media or self.choices or [])

    @property
    def choice_letters(self) -> str:
        """The option letters shown in the prompt, e.g. ``"ABCD"``; empty for open questions."""
        return LETTERS[: self.n_choices]

    @property
    def gold_letter(self) -> str | None:
        """The gold option letter for multiple-choice items, else None."""
        return self.gold_norm if self.answer_format == "letter" else None

    def media_refs(self) -> list[MediaRef]:
        """Every media reference of the item in prompt order (context, question images, image options)."""
        refs = [s.media for s in self.segments if s.media is not None]
        return refs + list(self.question_media) + list(self.choice_media or [])

    def _plan(
        self, with_prefix: bool, with_filler: bool
    ) -> list[tuple[str, str, dict, list[str | MediaRef]]]:
        """The spans as (role, name, meta, parts) with media still unloaded and adjacent text merged."""
        chunks: dict[tuple[str, int], list[str | MediaRef]] = {}
        query: list[str | MediaRef] = []
        for seg in self.segments:
            skip = (seg.role == "prefix" and not with_prefix) or (seg.role == "filler" and not with_filler)
            if not skip:
                parts = query if seg.role == "after" else chunks.setdefault((seg.role, seg.chunk), [])
                parts += [seg.text, *([seg.media] if seg.media is not None else [])]
        query += self.prompt.query_parts(self.question, self.question_media, self.choices, self.choice_media)
        plan: list[tuple[str, str, dict, list[str | MediaRef]]] = []
        n_a = 0
        for (role, chunk), parts in [*chunks.items(), (("query", -1), query)]:
            n_a += role == "A"
            name = {"A": f"A{n_a}", "filler": "filler"}.get(role, role)
            merged: list[str | MediaRef] = []
            for p in parts:
                if isinstance(p, str) and merged and isinstance(merged[-1], str):
                    merged[-1] += p
                elif not (isinstance(p, str) and p == ""):
                    merged.append(p)
            meta = {
                "item_id": self.item_id,
                "media": tuple(p.source_key for p in merged if isinstance(p, MediaRef)),
            }
            if role != "query":
                meta["chunk"] = chunk
            plan.append(("A" if role == "filler" else role, name, meta, merged))
        return plan

    def spans(self, *, with_prefix: bool = True, with_filler: bool = True) -> list[Span]:
        """``[prefix?, A_1..A_k, B, query]`` as ``kamera.items.spans.Span`` with media decoded to RGB images;
        consecutive frames of one video in a span become one :class:`~kamera.items.spans.Clip` (a video chunk)."""
        out = [
            Span(role, _load_parts(parts), name, meta)
            for role, name, meta, parts in self._plan(with_prefix, with_filler)
        ]
        validate_spans(out)
        return out

    def render_text(self, image_token: str = IMAGE_TOKEN, *, with_prefix: bool = True) -> str:
        """The whole prompt as one string with ``image_token`` for each picture (no decoding)."""
        return "".join(
            image_token if isinstance(p, MediaRef) else p
            for _, _, _, parts in self._plan(with_prefix, True)
            for p in parts
        )

    def validate(self, expected_media: Sequence[str] | None = None) -> None:
        """Check the item's invariants; ItemError naming the first violation.

        B is present and non-empty, A is non-empty, segments are ordered prefix < A/filler < B < after,
        every media reference of the source row appears exactly once (``expected_media`` are their
        source keys), the span shape passes ``validate_spans``, and a multiple-choice gold is a letter.
        """
        rank = {"prefix": 0, "A": 1, "filler": 1, "B": 2, "after": 3}
        ranks = [rank[s.role] for s in self.segments]
        if ranks != sorted(ranks):
            raise ItemError(f"segments out of order: {[s.role for s in self.segments]}")
        b = [s for s in self.segments if s.role == "B"]
        if not any(s.media is not None or s.text.strip() for s in b):
            raise ItemError("no B chunk: the B span would be empty")
        if len({s.chunk for s in b}) != 1:
            raise ItemError("B must be a single chunk")
        if not any(s.media is not None or s.text.strip() for s in self.segments if s.role == "A"):
            raise ItemError("no A chunk before B: the antecedent is empty")
        keys = [r.source_key for r in self.media_refs()]
        dup = sorted(k for k, c in Counter(keys).items() if c > 1)
        if dup:
            raise ItemError(f"media referenced more than once: {dup}")
        if expected_media is not None and Counter(keys) != Counter(expected_media):
            missing = sorted(set(expected_media) - set(keys))
            extra = sorted(set(keys) - set(expected_media))
            raise ItemError(f"media of the source row not placed exactly once: missing {missing}, extra {extra}")
        if self.answer_format == "letter" and (not self.gold_norm or self.gold_norm not in self.choice_letters):
            raise ItemError(f"gold letter {self.gold_norm!r} not among options {self.choice_letters!r}")
        dot = Image.new("RGB", (1, 1))  # stands in for each picture so the shape check decodes nothing
        shape = [
            Span(role, tuple(dot if isinstance(p, MediaRef) else p for p in parts), name)  # type: ignore[arg-type]
            for role, name, _, parts in self._plan(True, True)
        ]
        try:
            validate_spans(shape)
        except ValueError as e:
            raise ItemError(str(e)) from e
