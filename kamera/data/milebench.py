"""MileBench "Realistic Temporal" tasks: ActionSequence, ActionPrediction, ObjectShuffle, StateChange.

Published: github.com/MileBench/MileBench (code, Apache-2.0); data huggingface.co/datasets/
FreedomIntelligence/MileBench as ``MileBench_part{0..5}.tar.gz`` (licence stated inconsistently:
CC BY-NC 4.0 / CC-BY; treat as non-commercial). 200 items per task.
Layout (``generate.py``): ``<root>/<Task>/<Task>.json`` and ``<root>/<Task>/images/<images_path>``.
File: ``{"meta_data": {"task_instruction": [...], "question_type": "multi-choice", ...}, "data": [...]}``.
Item: ``sample_id``, ``task_instruction_id``, ``task_instance`` {``context`` with 1-based ``{image#k}`` /
``{table#k}`` placeholders, ``images_path``, ``choice_list``}, ``response`` (the gold option *text*).
Cut: frames are the chunks. The context is split at the placeholders (the i-th placeholder shows
``images_path[i]``, as the reference passes images in list order); each frame keeps the text leading
into it; the text after the last frame is the question (query). B = the last ``b`` frames, A = the
frames before (one A chunk per frame, or ``a_chunks`` groups). Default ``b``: half the frames
(``n - n//2``) for ActionSequence / ObjectShuffle / StateChange (the final, end-state frames), and the
last ``min(4, n - n//2)`` for ActionPrediction (the frames right before the predicted action);
``b_frames`` overrides it.
Prompt (``utils.py:MileBenchDataset``): ``task_instruction + "\\n" + context`` with placeholders as
images, then ``"\\nChoice list: \\nA. …\\nYour answer is: "`` (the reference's left truncation for long
contexts is not applied; use the length filter instead). Scoring: ``evaluate.py:match_choice``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from kamera.data.base import Benchmark, LoadContext, need, read_json
from kamera.data.errors import ItemError
from kamera.data.fixtures import index_image, save_png
from kamera.data.schema import LETTERS, ChunkedItem, MediaRef, PromptTemplate, Unit, interleaved_layout
from kamera.data.selection import Row

TASKS = ("ActionSequence", "ActionPrediction", "ObjectShuffle", "StateChange")
PLACEHOLDER = re.compile(r"\{(?:image|table)#\d+\}")
PROMPT = PromptTemplate(
    source="MileBench/MileBench utils.py:MileBenchDataset.__getitem__",
    prefix="{instruction}\n",
    choices_lead="\nChoice list: ",
    post="\nYour answer is: ",
)


def b_frame_count(task: str, n: int, b_frames: int | None) -> int:
    """How many final frames form B for ``task`` with ``n`` frames."""
    if b_frames is not None:
        return b_frames
    half = n - n // 2
    return min(4, half) if task == "ActionPrediction" else half


def _build(
    ctx: LoadContext, row: dict, instructions: list, item_id: str, a_chunks: int | None, b_frames: int | None
) -> ChunkedItem:
    inst = need(row, "task_instance", dict, item_id)
    images = need(inst, "images_path", list, item_id)
    choices = need(inst, "choice_list", list, item_id)
    context = need(inst, "context", str, item_id)
    k = row.get("task_instruction_id", 0)
    if not isinstance(k, int) or not 0 <= k < len(instructions):
        raise ItemError(f"task_instruction_id {k!r} outside the {len(instructions)} instructions")
    pieces = PLACEHOLDER.split(context)
    if len(pieces) - 1 != len(images):
        raise ItemError(
            f"context has {len(pieces) - 1} image placeholders for {len(images)} images_path entries"
        )
    n = len(images)
    b = b_frame_count(ctx.subset, n, b_frames)
    if n < 2 or not 1 <= b < n:
        raise ItemError(f"no B chunk: {n} frame(s) cannot be split into A and {b} B frame(s)")
    img_dir = ctx.base / ctx.subset / "images"
    units = [
        Unit(pieces[i], MediaRef("image", f"images_path[{i}]", path=img_dir / p))
        for i, p in enumerate(images)
    ]
    gold = need(row, "response", str, item_id)
    if gold not in choices:
        raise ItemError(f"response {gold!r} is not one of the choice_list options")
    instruction = str(instructions[k])
    item = ChunkedItem(
        benchmark="milebench",
        subset=ctx.subset,
        split=ctx.split,
        item_id=item_id,
        segments=interleaved_layout(
            PROMPT.prefix.replace("{instruction}", instruction), units, n - b, n, a_chunks
        ),
        question=pieces[-1],
        choices=[str(c) for c in choices],
        choice_media=None,
        gold=gold,
        gold_norm=LETTERS[choices.index(gold)],
        answer_format="letter",
        scorer="milebench_choice",
        cluster_key=item_id,
        prompt=PROMPT,
        meta={
            "sample_id": row.get("sample_id"),
            "instruction": instruction,
            "n_frames": n,
            "b_frames": b,
            "image_quantity_level": row.get("image_quantity_level"),
        },
    )
    item.validate(expected_media=[f"images_path[{i}]" for i in range(n)])
    return item


def rows(ctx: LoadContext, *, a_chunks: int | None = None, b_frames: int | None = None) -> Iterator[Row]:
    """Multiple-choice items of ``<Task>/<Task>.json``."""
    if b_frames is not None and b_frames < 1:
        raise ValueError(f"b_frames must be >= 1, got {b_frames}")
    path = ctx.file(f"{ctx.subset}/{ctx.subset}.json")
    doc = read_json(path, ctx.subset)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise ValueError(f"{path}: expected an object with a 'data' list")
    meta = doc.get("meta_data") or {}
    instructions = meta.get("task_instruction") or [""]
    if meta.get("question_type", "multi-choice") != "multi-choice":
        ctx.report.filter(f"question_type {meta.get('question_type')!r}")
        return
    for n, row in enumerate(doc["data"]):
        if not isinstance(row, dict) or "sample_id" not in row:
            ctx.report.skip(f"{ctx.subset}:data[{n}]", "record has no sample_id", "row")
            continue
        item_id = ctx.item_id(row["sample_id"])
        yield Row(
            item_id,
            lambda row=row, item_id=item_id: _build(ctx, row, instructions, item_id, a_chunks, b_frames),
        )


def write_fixture(root: Path, n: int = 3, seed: int = 0) -> Path:
    """``<Task>/<Task>.json`` + ``<Task>/images/`` for the four tasks, ``n`` items each with 4–8 frames."""
    for t, task in enumerate(TASKS):
        data = []
        for i in range(n):
            n_frames = 4 + (i + seed + t) % 5
            paths = [f"{task}_{i}_{k}.jpg" for k in range(n_frames)]
            for k, p in enumerate(paths):
                save_png(
                    index_image(k, (32, 32)), root / task / "images" / p
                )  # PNG bytes behind .jpg names, as some dumps do
            options = [f"The person did action {c}." for c in range(4)]
            context = "".join(f"Frame {k + 1}: {{image#{k + 1}}}\n" for k in range(n_frames))
            data.append(
                {
                    "sample_id": i,
                    "task_instruction_id": i % 2,
                    "task_instance": {
                        "context": context + "What did the person do last?",
                        "images_path": paths,
                        "choice_list": options,
                    },
                    "response": options[(i + seed) % 4],
                    "image_quantity_level": "Few" if n_frames <= 5 else "Medium",
                }
            )
        doc = {
            "meta_data": {
                "task_instruction": [f"{task}: watch the frames in order.", f"{task} instruction 2."],
                "question_type": "multi-choice",
            },
            "data": data,
        }
        (root / task).mkdir(parents=True, exist_ok=True)
        (root / task / f"{task}.json").write_text(json.dumps(doc, indent=4), encoding="utf-8")
    return root


SPEC = Benchmark(
    name="milebench",
    dir_name="MileBench",
    published="https://huggingface.co/datasets/FreedomIntelligence/MileBench (code: https://github.com/MileBench/MileBench)",
    expected_files=("<Task>/<Task>.json and <Task>/images/ for Task in " + ", ".join(TASKS),),
    subsets=TASKS,
    default_subsets=TASKS,
    splits=("test",),
    default_split="test",
    rows=rows,
    fixture=write_fixture,
    licence="CC BY-NC 4.0 / CC-BY (stated inconsistently); non-commercial",
)
