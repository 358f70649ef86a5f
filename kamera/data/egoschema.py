"""EgoSchema public-answer Subset (500 questions, 5 options) over uniformly sampled frames.

Published: github.com/egoschema/EgoSchema (``questions.json``, ``subset_answers.json``) and
huggingface.co/datasets/lmms-lab/egoschema (config ``Subset``, split ``test``; card licence MIT; the
videos are Ego4D-derived, so Ego4D's terms apply too). Two layouts are read:
- HF: ``Subset/test-*.parquet`` rows {``video_idx``, ``question``, ``option`` (5 strings, "A. …"
  prefixed in lmms-eval's copy; prefixes stripped and re-added), ``answer`` (0–4, int or digit string)};
- GitHub: ``questions.json`` rows {``q_uid``, ``question``, ``"option 0"`` … ``"option 4"`` (keys with a
  space)} joined on ``q_uid`` with the flat ``{q_uid: int}`` ``subset_answers.json``; questions without a
  public answer are filtered out.
Videos: ``videos/<video_idx or q_uid>.mp4`` (unzipped ``videos_chunked_0{1..5}.zip``).
Cut: ``n_frames`` (default 32) uniform frames; A = first half (``a_chunks`` groups, default 1), B = the
second half. Prompt (lmms-eval ``egoschema_doc_to_text``): question, the options one per line, then
"\\nAnswer with the option's letter from the given choices directly."; gold letter ``"ABCDE"[answer]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from kamera.data.base import Benchmark, LoadContext, find_video, need, read_json, read_parquet, video_mc_item
from kamera.data.errors import ItemError
from kamera.data.fixtures import write_mp4, write_parquet
from kamera.data.schema import LETTERS, ChunkedItem, PromptTemplate
from kamera.data.selection import Row

PROMPT = PromptTemplate(
    source="EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/egoschema/utils.py:egoschema_doc_to_text",
    post="\nAnswer with the option's letter from the given choices directly.",
)


def _build(ctx: LoadContext, row: dict, item_id: str, n_frames: int, a_chunks: int | None) -> ChunkedItem:
    uid = need(row, "video_idx", str, item_id)
    options = [str(o) for o in need(row, "option", list, item_id)]
    try:
        answer = int(row["answer"])
    except (KeyError, TypeError, ValueError):
        raise ItemError(f"answer {row.get('answer')!r} is not an option index") from None
    if not 0 <= answer < len(options):
        raise ItemError(f"answer {answer} outside the {len(options)} options")
    return video_mc_item(
        ctx,
        item_id=item_id,
        video=find_video(ctx.base / "videos", uid),
        n_frames=n_frames,
        a_chunks=a_chunks,
        question=need(row, "question", str, item_id),
        options=options,
        gold=row["answer"],
        gold_letter=LETTERS[answer],
        prompt=PROMPT,
        cluster_key=uid,
        meta={"video_idx": uid, "question_idx": row.get("question_idx")},
    )


def _github_rows(ctx: LoadContext) -> list[dict]:
    """``questions.json`` joined with ``subset_answers.json`` into the HF row shape."""
    questions = read_json(ctx.file("questions.json"), "EgoSchema questions.json")
    answers = read_json(ctx.file("subset_answers.json"), "EgoSchema subset_answers.json")
    out = []
    for q in questions:
        uid = q.get("q_uid")
        if uid not in answers:
            ctx.report.filter("no public answer")
            continue
        options = [q.get(f"option {k}") for k in range(5)]
        out.append(
            {"video_idx": uid, "question": q.get("question"), "option": options, "answer": answers[uid]}
        )
    return out


def rows(ctx: LoadContext, *, n_frames: int = 32, a_chunks: int | None = 1) -> Iterator[Row]:
    """Rows of the HF parquet, else of the GitHub json pair."""
    if n_frames < 2:
        raise ValueError(f"n_frames must be >= 2, got {n_frames}")
    parquet = sorted((ctx.base / ctx.subset).glob(f"{ctx.split}-*.parquet"))
    if parquet:
        records = read_parquet(parquet)
    elif (ctx.base / "questions.json").exists():
        records = _github_rows(ctx)
    else:
        raise ctx.missing(
            ctx.base / ctx.subset, list(SPEC.expected_files), "no annotation file (HF or GitHub layout)"
        )
    for n, row in enumerate(records):
        native = row.get("video_idx")
        if not isinstance(native, str):
            ctx.report.skip(f"row{n}", "record has no string video_idx / q_uid", "row")
            continue
        item_id = ctx.item_id(native)
        yield Row(item_id, lambda row=row, item_id=item_id: _build(ctx, row, item_id, n_frames, a_chunks))


def write_fixture(root: Path, n: int = 3, seed: int = 0, layout: str = "hf") -> Path:
    """``n`` questions over ``n`` short mp4s in ``videos/``, as the HF ``Subset`` parquet or as the GitHub
    ``questions.json`` (one line, "option k" keys, plus one unanswered question) + ``subset_answers.json``."""
    uids = [f"{i:08x}-aaaa-4bbb-8ccc-{seed:012x}" for i in range(n)]
    for i, uid in enumerate(uids):
        write_mp4(root / "videos" / f"{uid}.mp4", 36 + (i + seed) % 6)
    if layout == "hf":
        recs = [
            {
                "question_idx": str(i),
                "question": f"What is the camera wearer mainly doing in clip {i}?",
                "video_idx": uid,
                "option": [f"{letter}. Activity {letter}{i}" for letter in "ABCDE"],
                "answer": str((i + seed) % 5),
            }
            for i, uid in enumerate(uids)
        ]
        write_parquet(recs, root / "Subset" / "test-00000-of-00001.parquet")
    elif layout == "github":
        questions = [
            {
                "q_uid": uid,
                "google_drive_id": f"drive{i}",
                "question": f"What happens in clip {i}?",
                **{f"option {k}": f"Activity {k} in clip {i}" for k in range(5)},
            }
            for i, uid in enumerate([*uids, "ffffffff-0000-4000-8000-000000000000"])
        ]
        (root / "questions.json").write_text(json.dumps(questions), encoding="utf-8")
        answers = {uid: (i + seed) % 5 for i, uid in enumerate(uids)}
        (root / "subset_answers.json").write_text(json.dumps(dict(sorted(answers.items()))), encoding="utf-8")
    else:
        raise ValueError(f"layout must be 'hf' or 'github', got {layout!r}")
    return root


SPEC = Benchmark(
    name="egoschema",
    dir_name="EgoSchema",
    published="https://huggingface.co/datasets/lmms-lab/egoschema (https://github.com/egoschema/EgoSchema)",
    expected_files=(
        "Subset/test-*.parquet (HF) or questions.json + subset_answers.json (GitHub)",
        "videos/<video_idx>.mp4",
    ),
    subsets=("Subset",),
    default_subsets=("Subset",),
    splits=("test",),
    default_split="test",
    rows=rows,
    fixture=write_fixture,
    licence="MIT (HF card); Ego4D terms for the videos",
)
