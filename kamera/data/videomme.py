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
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kamera.data.base import Benchmark, LoadContext, find_video, need, read_parquet, video_mc_item
from kamera.data.errors import ItemError
from kamera.data.fixtures import write_mp4, write_parquet
from kamera.data.schema import LETTERS, ChunkedItem, PromptTemplate
from kamera.data.selection import Row

DURATIONS = ("short", "medium", "long")
PROMPT = PromptTemplate(
    source="BradyFU/Video-MME README evaluation prompt (frames only); lmms-eval tasks/videomme/utils.py",
    query_lead="Select the best answer to the following multiple-choice question based on the video. "
    "Respond with only the letter (A, B, C, or D) of the correct option.\n",
    post="\nThe best answer is:",
)


def _build(ctx: LoadContext, row: dict, item_id: str, n_frames: int, a_chunks: int | None) -> ChunkedItem:
    video_id = need(row, "videoID", str, item_id)
    answer = need(row, "answer", str, item_id).strip().upper()
    options = [str(o) for o in need(row, "options", list, item_id)]
    if answer not in LETTERS[: len(options)]:
        raise ItemError(f"answer {row['answer']!r} is not an option letter")
    return video_mc_item(
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


def rows(
    ctx: LoadContext, *, n_frames: int = 32, a_chunks: int | None = 1, task_types: list[str] | None = None
) -> Iterator[Row]:
    """Questions of the subset's duration from ``videomme/<split>-*.parquet``."""
    if n_frames < 2:
        raise ValueError(f"n_frames must be >= 2, got {n_frames}")
    for n, row in enumerate(read_parquet(ctx.glob(f"videomme/{ctx.split}-*.parquet"))):
        if row.get("duration") != ctx.subset:
            continue  # another subset's row, not a filter
        if task_types is not None and row.get("task_type") not in task_types:
            ctx.report.filter("task_type not selected")
            continue
        item_id = ctx.item_id(row.get("question_id") or f"row{n}")
        yield Row(item_id, lambda row=row, item_id=item_id: _build(ctx, row, item_id, n_frames, a_chunks))


def write_fixture(root: Path, n: int = 3, seed: int = 0) -> Path:
    """``videomme/test-00000-of-00001.parquet`` with ``n`` questions per duration over ``n`` short mp4s
    in ``data/`` (40–47 frames at 8 fps, each frame showing its index)."""
    recs = []
    for v in range(n):
        vid = f"vid{v:03d}xyzAB"[:11]
        write_mp4(root / "data" / f"{vid}.mp4", 40 + (v + seed) % 8)
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
