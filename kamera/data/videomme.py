"""Video-MME multiple choice over uniformly sampled frames: first half of the frames A, second half B.

Published: github.com/BradyFU/Video-MME; data huggingface.co/datasets/lmms-lab/Video-MME (academic
research only, no redistribution). 900 videos, 2,700 questions, split ``test``.
Layout (HF + lmms-eval): ``videomme/test-00000-of-00001.parquet``; videos unzipped from
``videos_chunked_XX.zip`` to ``data/<videoID>.mp4`` (``.MP4`` / ``.mkv`` accepted); ``subtitle/`` unused.
Row: ``video_id``, ``duration`` (short / medium / long = the subsets), ``domain``, ``sub_category``,
``url``, ``videoID``, ``question_id``, ``task_type``, ``question``, ``options`` (4 strings prefixed
"A. " … "D. "; the prefixes are stripped and re-added by the template), ``answer`` (a letter).
Cut: ``n_frames`` (default 32, lmms-eval's ``frame_num``) uniformly sampled frames, decoded with PyAV
and cached; A = the first half (``a_chunks`` groups, default 1), B = the second half. ``task_types``
filters by ``task_type``. ``cluster_key`` is ``videoID`` (three questions share a video).
Prompt (official, frames only): "Select the best answer to the following multiple-choice question based
on the video. Respond with only the letter (A, B, C, or D) of the correct option.\\n{question}\\n{options}
\\nThe best answer is:" after the frames.

Audio (``audio=True``, Fig. 10's audio setting; the paper does not name its audio data, and this is our reading
of it): A = the first half of the sampled frames, as above; B = the video's audio track from the time of the
first frame B would have held (the middle of the sampled frames) for ``audio_seconds`` (default 30 s; less
where the video ends first), decoded with PyAV at 16 kHz mono. The second half's frames are not placed. An
item whose video has no audio stream is skipped at build time (MediaError).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

from kamera.data.base import Benchmark, LoadContext, find_video, need, read_parquet, video_mc_item
from kamera.data.errors import ItemError
from kamera.data.fixtures import write_mp4, write_parquet
from kamera.data.schema import LETTERS, ChunkedItem, MediaRef, PromptTemplate, Unit, group_evenly, layout
from kamera.data.selection import Row

DURATIONS = ("short", "medium", "long")
PROMPT = PromptTemplate(
    source="BradyFU/Video-MME README evaluation prompt (frames only); lmms-eval tasks/videomme/utils.py",
    query_lead="Select the best answer to the following multiple-choice question based on the video. "
    "Respond with only the letter (A, B, C, or D) of the correct option.\n",
    post="\nThe best answer is:",
)


def _build(
    ctx: LoadContext, row: dict, item_id: str, n_frames: int, a_chunks: int | None, audio_seconds: float | None
) -> ChunkedItem:
    video_id = need(row, "videoID", str, item_id)
    answer = need(row, "answer", str, item_id).strip().upper()
    options = [str(o) for o in need(row, "options", list, item_id)]
    if answer not in LETTERS[: len(options)]:
        raise ItemError(f"answer {row['answer']!r} is not an option letter")
    item = video_mc_item(
        ctx,
        item_id=item_id,
        video=find_video(ctx.base / "data", video_id),
        n_frames=n_frames,
        a_chunks=a_chunks,
        question=need(row, "question", str, item_id),
        options=options,
        gold=row["answer"],
        gold_letter=answer,
        prompt=PROMPT,
        cluster_key=video_id,
        meta={
            k: row.get(k)
            for k in ("video_id", "videoID", "question_id", "duration", "domain", "sub_category", "task_type")
        },
    )
    return item if audio_seconds is None else _with_audio_b(item, audio_seconds)


def _with_audio_b(item: ChunkedItem, audio_seconds: float) -> ChunkedItem:
    """The item with B replaced by the audio track from B's first frame for ``audio_seconds`` (to the video's end
    at most); A keeps the first half's frames, which decode as a group of their own."""
    frames = [s.media for s in item.segments if s.media is not None and s.media.kind == "video_frame"]
    a = [f for s, f in zip(item.segments, frames, strict=True) if s.role == "A"]
    start = float(frames[len(a)].timestamp_s or 0.0)
    length = min(audio_seconds, float(item.meta["duration_s"]) - start)
    if length <= 0:
        raise ItemError(
            f"video {item.meta['video']} ends at {item.meta['duration_s']:.1f} s, before its audio B at {start:.1f} s"
        )
    group = tuple(int(f.frame_index) for f in a)
    units = [Unit("", dataclasses.replace(f, frame_group=group)) for f in a]
    n_chunks = len({s.chunk for s in item.segments if s.role == "A"})
    audio = MediaRef(
        "audio", f"audio[{start:.2f}s:{start + length:.2f}s]", path=frames[0].path, timestamp_s=start, duration_s=length
    )
    chunks = [([units[i] for i in g], False) for g in group_evenly(len(units), n_chunks)]
    out = dataclasses.replace(
        item,
        segments=layout("", chunks, [Unit("", audio)]),
        meta={**item.meta, "audio_b": {"start_s": start, "duration_s": length}},
    )
    out.validate(expected_media=[*(f.source_key for f in a), audio.source_key])
    return out


def rows(
    ctx: LoadContext,
    *,
    n_frames: int = 32,
    a_chunks: int | None = 1,
    task_types: list[str] | None = None,
    audio: bool = False,
    audio_seconds: float = 30.0,
) -> Iterator[Row]:
    """Questions of the subset's duration from ``videomme/<split>-*.parquet``; ``audio``: B is the audio track."""
    if n_frames < 2:
        raise ValueError(f"n_frames must be >= 2, got {n_frames}")
    if audio_seconds <= 0:
        raise ValueError(f"audio_seconds must be > 0, got {audio_seconds}")
    seconds = audio_seconds if audio else None
    for n, row in enumerate(read_parquet(ctx.glob(f"videomme/{ctx.split}-*.parquet"))):
        if row.get("duration") != ctx.subset:
            continue  # another subset's row, not a filter
        if task_types is not None and row.get("task_type") not in task_types:
            ctx.report.filter("task_type not selected")
            continue
        item_id = ctx.item_id(row.get("question_id") or f"row{n}")
        yield Row(item_id, lambda row=row, item_id=item_id: _build(ctx, row, item_id, n_frames, a_chunks, seconds))


def write_fixture(root: Path, n: int = 3, seed: int = 0) -> Path:
    """``videomme/test-00000-of-00001.parquet`` with ``n`` questions per duration over ``n`` short mp4s
    in ``data/`` (40–47 frames at 8 fps, each frame showing its index, with an audio track: a tone at
    300 + 100·v Hz for video v, as Video-MME's videos carry sound)."""
    recs = []
    for v in range(n):
        vid = f"vid{v:03d}xyzAB"[:11]
        write_mp4(root / "data" / f"{vid}.mp4", 40 + (v + seed) % 8, tone_hz=300.0 + 100 * v)
        for d, duration in enumerate(DURATIONS):
            recs.append(
                {
                    "video_id": f"{v:03d}",
                    "duration": duration,
                    "domain": "Knowledge",
                    "sub_category": "Astronomy",
                    "url": f"https://www.youtube.com/watch?v={vid}",
                    "videoID": vid,
                    "question_id": f"{v:03d}-{d + 1}",
                    "task_type": "Temporal Reasoning" if d else "Counting Problem",
                    "question": f"What happens after frame {v}?",
                    "options": [f"{letter}. Outcome {letter}{v}" for letter in "ABCD"],
                    "answer": "ABCD"[(v + d + seed) % 4],
                }
            )
    write_parquet(recs, root / "videomme" / "test-00000-of-00001.parquet")
    return root


SPEC = Benchmark(
    name="videomme",
    dir_name="Video-MME",
    published="https://huggingface.co/datasets/lmms-lab/Video-MME (https://github.com/BradyFU/Video-MME)",
    expected_files=("videomme/test-*.parquet", "data/<videoID>.mp4 (unzipped videos_chunked_XX.zip)"),
    subsets=DURATIONS,
    default_subsets=DURATIONS,
    splits=("test",),
    default_split="test",
    rows=rows,
    fixture=write_fixture,
    licence="academic research only; no redistribution",
)
