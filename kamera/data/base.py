"""What each benchmark module declares (:class:`Benchmark`) and what its row lister receives
(:class:`LoadContext`), plus small readers shared by the loaders."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kamera.data.errors import BenchmarkDataMissing, ItemError
from kamera.data.media import probe_video, sample_frame_indices
from kamera.data.schema import LETTERS, ChunkedItem, MediaRef, PromptTemplate, Unit, interleaved_layout
from kamera.data.selection import LoadReport, Row


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's registry entry: where it lives, what it needs on disk, its subsets and splits, the
    row lister (``rows(ctx, **bench_kwargs) -> Iterator[Row]``) and the fixture writer."""

    name: str
    dir_name: str | None  # directory under $KAMERA_DATA; None for in-memory benchmarks
    published: str
    expected_files: tuple[str, ...]
    subsets: tuple[str, ...]
    default_subsets: tuple[str, ...]
    splits: tuple[str, ...]
    default_split: str
    rows: Callable[..., Iterator[Row]]
    fixture: Callable[..., Path] | None = None
    licence: str = ""

    @property
    def source(self) -> str:
        """Where the benchmark is published, with its licence (for error messages)."""
        return f"{self.published} (licence: {self.licence})" if self.licence else self.published

    def resolve_subsets(self, subset: str | None) -> list[str]:
        """``None`` → the default subsets; ``"a,b"`` → both; ValueError naming the valid subsets."""
        names = list(self.default_subsets) if subset is None else [s.strip() for s in subset.split(",")]
        bad = [s for s in names if s not in self.subsets]
        if bad or not names:
            raise ValueError(f"{self.name}: unknown subset(s) {bad}; valid: {list(self.subsets)}")
        return names

    def resolve_split(self, split: str | None) -> str:
        """``None`` → the default split; ValueError naming the valid splits."""
        split = self.default_split if split is None else split
        if split not in self.splits:
            raise ValueError(f"{self.name}: unknown split {split!r}; valid: {list(self.splits)}")
        return split


@dataclass
class LoadContext:
    """Everything a row lister needs for one subset: the root, the cache, the report, the seed."""

    bench: Benchmark
    root: Path | None
    subset: str
    split: str
    seed: int
    report: LoadReport
    cache_dir: Path | None = None
    n_items: int | None = None

    @property
    def base(self) -> Path:
        """The benchmark root (only for file-based benchmarks)."""
        if self.root is None:
            raise RuntimeError(f"{self.bench.name} has no data root")
        return self.root

    def missing(self, tried: Path, expected: list[str], why: str) -> BenchmarkDataMissing:
        """The error for a missing file or directory under this benchmark's root."""
        return BenchmarkDataMissing(self.bench.name, tried, expected, self.bench.source, why)

    def file(self, *candidates: str) -> Path:
        """The first existing of ``candidates`` (relative to the root); BenchmarkDataMissing otherwise."""
        for rel in candidates:
            if (self.base / rel).exists():
                return self.base / rel
        raise self.missing(self.base / candidates[0], list(candidates), "missing file")

    def glob(self, pattern: str) -> list[Path]:
        """Files matching ``pattern`` under the root, sorted; BenchmarkDataMissing when none match."""
        found = sorted(self.base.glob(pattern))
        if not found:
            raise self.missing(self.base / pattern, [pattern], "no file matches")
        return found

    def item_id(self, native: object, suffix: str = "") -> str:
        """The stable item id ``<bench>/<subset>/<split>/<native id>[/<variant>]``."""
        return f"{self.bench.name}/{self.subset}/{self.split}/{native}" + (f"/{suffix}" if suffix else "")


# ----- benchmarks generated in memory (synthetic, synthetic_audio, binding_words) ------------------------------
def generated_id(ctx: LoadContext, index: int) -> str:
    """The id of a generated benchmark's ``index``-th row: it depends only on (bench, subset, split, seed, index)."""
    return ctx.item_id(f"s{ctx.seed}-{index:05d}")


def generated_benchmark(name: str, rows: Callable[..., Iterator[Row]],
                        subsets: tuple[str, ...] = ("bind",)) -> Benchmark:
    """The ``SPEC`` of a benchmark generated in memory by ``kamera.data.<name>``: no files, every subset by default,
    one split (``test``)."""
    return Benchmark(name=name, dir_name=None, published=f"generated in memory by kamera.data.{name}",
                     expected_files=(), subsets=subsets, default_subsets=subsets, splits=("test",),
                     default_split="test", rows=rows)


def check_within(knob: str, value: int, low: int, high: int) -> None:
    """ValueError naming ``knob`` unless ``low <= value <= high`` (a generated benchmark's option)."""
    if not low <= value <= high:
        raise ValueError(f"{knob} must be {low}..{high}, got {value}")


def generated_rows(ctx: LoadContext, n_total: int | None, build: Callable[[int], ChunkedItem]) -> Iterator[Row]:
    """``n_total`` rows (default ``max(64, n_items)``), each built lazily (on selection) by ``build(index)``."""
    total = n_total if n_total is not None else max(64, ctx.n_items or 0)
    for i in range(total):
        yield Row(generated_id(ctx, i), lambda i=i: build(i))


def letter_item(ctx: LoadContext, index: int, *, segments: list, question: str, options: list[str], answer: str,
                prompt: PromptTemplate, meta: dict) -> ChunkedItem:
    """A generated multiple-choice item scored by the answer's letter; each item is its own cluster."""
    item_id, letter = generated_id(ctx, index), LETTERS[options.index(answer)]
    return ChunkedItem(
        benchmark=ctx.bench.name, subset=ctx.subset, split=ctx.split, item_id=item_id, segments=segments,
        question=question, choices=options, choice_media=None, gold=letter, gold_norm=letter, answer_format="letter",
        scorer="mc_letter", cluster_key=item_id, prompt=prompt, meta=meta,
    )


_READS: ContextVar[list[Path] | None] = ContextVar("kamera_data_reads", default=None)


@contextmanager
def recording_reads() -> Iterator[list[Path]]:
    """Collect the annotation files :func:`read_jsonl`, :func:`read_json` and :func:`read_parquet` read
    inside the block (the runner fingerprints exactly the files a job's items came from)."""
    files: list[Path] = []
    token = _READS.set(files)
    try:
        yield files
    finally:
        _READS.reset(token)


def media_files(items: list[ChunkedItem]) -> list[Path]:
    """The media files the items read (image files, videos, PDFs; each once, in order): what the job's data
    fingerprint digests beside the annotation files :func:`recording_reads` collects. Media embedded in an
    annotation file (parquet image bytes) are covered by that file's digest; a medium an item drops
    (``meta["dropped_media"]``) is not read and not listed."""
    seen: dict[Path, None] = {}
    for item in items:
        dropped = set(item.meta.get("dropped_media") or ())
        for ref in item.media_refs():
            if ref.path is not None and ref.data is None and ref.source_key not in dropped:
                seen.setdefault(Path(ref.path), None)
    return list(seen)


def _note_read(path: Path) -> None:
    files = _READS.get()
    if files is not None:
        files.append(Path(path))


def read_jsonl(path: Path, report: LoadReport, what: str) -> Iterator[tuple[int, dict]]:
    """(line number, record) for each JSON line; unparseable lines are skipped and recorded.

    Plain ``json`` rather than ``datasets.load_dataset("json")``: rows come back exactly as written
    (MM-NIAH mixes int / list / str in ``answer`` and float / list in ``placed_depth``, which the
    builder unifies into one column type), a bad line costs one row instead of the whole file, and
    no Arrow cache is written.
    """
    _note_read(path)
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                report.skip(f"{what}:line{n}", f"invalid JSON: {e}", "row")
                continue
            if not isinstance(rec, dict):
                report.skip(f"{what}:line{n}", f"expected a JSON object, got {type(rec).__name__}", "row")
                continue
            yield n, rec


def read_json(path: Path, what: str) -> Any:
    """A whole JSON file; a corrupt annotation file fails the whole load with ValueError naming it."""
    _note_read(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: {path} is not valid JSON: {e}") from e


def read_parquet(paths: list[Path], columns: list[str] | None = None) -> list[dict]:
    """Rows of one or more parquet files as dicts.

    Read with pyarrow directly rather than ``datasets.load_dataset("parquet")``: no cache is written
    next to the user's HF cache, nothing can reach the network, and embedded images stay as their
    encoded bytes (``{"bytes", "path"}`` structs) to be decoded lazily.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for p in paths:
        _note_read(p)
        try:
            table = pq.read_table(p, columns=columns)
        except (pa.ArrowException, OSError) as e:  # truncated or not parquet at all
            raise ValueError(f"{p} is not a readable parquet file ({type(e).__name__}: {e})") from e
        rows += table.to_pylist()
    return rows


def need(row: dict, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``row[key]`` checked for type; ItemError naming the field when missing or mistyped."""
    if key not in row or row[key] is None:
        raise ItemError(f"{what}: field {key!r} missing")
    value = row[key]
    if not isinstance(value, kind):
        raise ItemError(f"{what}: field {key!r} is {type(value).__name__}, expected {kind}")
    return value


_LETTER_PREFIX = re.compile(r"^\s*\(?([A-Z])[\.\)]\s+")


def strip_option_letter(option: str, letter: str) -> str:
    """An option text without its own ``"A. "`` / ``"(A) "`` prefix (Video-MME and EgoSchema options
    carry one; the templates add the letters back)."""
    m = _LETTER_PREFIX.match(option)
    return option[m.end() :] if m and m.group(1) == letter else option


def video_units(path: Path, n_frames: int, cache_dir: Path) -> tuple[list[Unit], dict[str, Any]]:
    """``n_frames`` uniformly sampled frames of a video as lazy frame units, plus sampling metadata."""
    info = probe_video(path)
    indices = sample_frame_indices(info.n_frames, n_frames, f"video {path.name}")
    group = tuple(indices)
    units = [
        Unit(
            "",
            MediaRef(
                "video_frame",
                f"frame[{i}]",
                path=path,
                frame_index=i,
                frame_group=group,
                timestamp_s=i / info.fps,
                cache_dir=cache_dir,
            ),
        )
        for i in indices
    ]
    meta = {
        "video_frames": info.n_frames,
        "fps": info.fps,
        "duration_s": info.duration_s,
        "frame_indices": indices,
    }
    return units, meta


def find_video(folder: Path, stem: str) -> Path:
    """``<folder>/<stem>.mp4`` (or .MP4 / .mkv, as lmms-eval accepts); ItemError when none exists."""
    for ext in (".mp4", ".MP4", ".mkv"):
        if (folder / f"{stem}{ext}").exists():
            return folder / f"{stem}{ext}"
    raise ItemError(f"video missing: {folder / stem}.mp4")


def video_mc_item(
    ctx: LoadContext,
    *,
    item_id: str,
    video: Path,
    n_frames: int,
    a_chunks: int | None,
    question: str,
    options: list[str],
    gold: Any,
    gold_letter: str,
    prompt: PromptTemplate,
    cluster_key: str,
    meta: dict[str, Any],
) -> ChunkedItem:
    """A video multiple-choice item: ``n_frames`` uniform frames, the first half A (``a_chunks``
    groups), the second half B; the query is the question and the options."""
    if ctx.cache_dir is None:
        raise RuntimeError("video items need a cache directory")
    units, sampling = video_units(video, n_frames, ctx.cache_dir)
    choices = [strip_option_letter(o, LETTERS[i]) for i, o in enumerate(options)]
    item = ChunkedItem(
        benchmark=ctx.bench.name,
        subset=ctx.subset,
        split=ctx.split,
        item_id=item_id,
        segments=interleaved_layout("", units, n_frames // 2, n_frames, a_chunks),
        question=question,
        choices=choices,
        choice_media=None,
        gold=gold,
        gold_norm=gold_letter,
        answer_format="letter",
        scorer="mc_letter",
        cluster_key=cluster_key,
        prompt=prompt,
        meta={**meta, **sampling, "video": video.name, "options_prefixed": choices != options},
    )
    item.validate(expected_media=[u.media.source_key for u in units if u.media is not None])
    return item
