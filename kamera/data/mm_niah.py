"""MM-NIAH (Needle In A Multimodal Haystack), image-needle tasks: retrieval-, reasoning-, counting-image.

Published: github.com/OpenGVLab/MM-NIAH, huggingface.co/datasets/OpenGVLab/MM-NIAH (MIT); the val
annotations and ``mm_niah_val/images.tar.gz`` (unpacked) are needed; test labels are not released.
Layout (``shells/data/mm_niah.json``): ``mm_niah_{val,test}/annotations/<task>.jsonl`` with the image
root ``mm_niah_{val,test}/images``.
Row (README "Data Format"): ``id``; ``images_list`` (paths relative to the image root, one per
``<image>`` in context + question, option images excluded); ``context`` (``<image>`` placeholders);
``question``; ``answer`` (int option index for multiple choice, list for counting, possibly as a JSON
string); ``meta`` {placed_depth, context_length, num_images, needles, choices, choices_image_path}.

Cut: the context is split at ``<image>`` into units (the text leading into an image, then the image).
- retrieval-/reasoning-image: B = the unit holding the last needle image, A = every unit before it (one
  A chunk per unit, or ``a_chunks`` groups). The needle is found by its path in ``images_list`` when
  ``meta.needles`` lists it there (reasoning-image); otherwise (retrieval-image pastes the needle into a
  haystack image) by ``meta.placed_depth``: ``needle_locator="offset"`` takes the ``<image>`` whose
  character offset / len(context) is nearest the depth, ``"count"`` the image ``round(depth·(n-1))``.
  Both candidates are kept in ``meta`` to check on a real copy.
- counting-image: A = the first half of the images, B = the second half (the gold list spans both).
Context after B (later haystack text and images) opens the query span (``after_b="query"``, faithful
to the source prompt) or is dropped (``after_b="drop"``; dropped images are listed in meta).
``max_context_length`` pre-filters on ``meta.context_length`` before anything is built.
Prompt (``utils/tools.py:get_input``, ``eval_internvl.py``): ``f"{context}\\n{question}"`` with ``</s>``
removed from the context, options as ``\\nA. text`` or ``\\nA. <image>``, then the task's post-prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from kamera.data.base import Benchmark, LoadContext, need, read_jsonl
from kamera.data.errors import ItemError
from kamera.data.fixtures import index_image, save_png, write_jsonl
from kamera.data.schema import (
    IMAGE_TOKEN,
    LETTERS,
    ChunkedItem,
    MediaRef,
    PromptTemplate,
    Unit,
    interleaved_layout,
    split_placeholders,
)
from kamera.data.selection import Row

SUBSETS = ("retrieval-image", "reasoning-image", "counting-image")
PROMPT_MC = PromptTemplate(
    source="OpenGVLab/MM-NIAH utils/tools.py:get_input + eval_internvl.py (f'{context}\\n{question}')",
    question="\n{question}",
    post="\nAnswer with the option's letter from the given choices directly.",
)
PROMPT_OPEN = PromptTemplate(
    source="OpenGVLab/MM-NIAH utils/tools.py:get_input (counting / open questions)",
    question="\n{question}",
    post="\nAnswer the question using a single word or phrase.",
)


def _needle_index(
    row_meta: dict, images: list[str], n_ctx: int, context: str, locator: str
) -> tuple[int, dict]:
    """Index of the context image holding the (last) needle, and how it was found."""
    needles = row_meta.get("needles") or []
    by_path = [images.index(p) for p in needles if isinstance(p, str) and p in images[:n_ctx]]
    depth = row_meta.get("placed_depth")
    depth = max(depth) if isinstance(depth, list) and depth else depth
    info: dict = {"needle_by_path": by_path}
    if isinstance(depth, int | float) and n_ctx:
        offsets, pos = [], -1
        for _ in range(n_ctx):
            pos = context.index(IMAGE_TOKEN, pos + 1)
            offsets.append(pos / max(len(context), 1))
        info["needle_by_offset"] = min(range(n_ctx), key=lambda i: (abs(offsets[i] - depth), i))
        info["needle_by_count"] = round(depth * (n_ctx - 1))
    if by_path:
        return max(by_path), {**info, "needle_locator": "path"}
    key = f"needle_by_{locator}"
    if key not in info:
        raise ItemError("no B chunk: needle image not in images_list and no usable meta.placed_depth")
    return info[key], {**info, "needle_locator": locator}


def _gold(answer: object, subset: str) -> tuple[object, str, str]:
    """(normalised gold, answer format, scorer) for an MM-NIAH answer."""
    if subset == "counting-image":
        counts = json.loads(answer) if isinstance(answer, str) else answer
        if not isinstance(counts, list) or not all(isinstance(c, int) for c in counts):
            raise ItemError(f"counting answer {answer!r} is not a list of integers")
        return counts, "list", "mmniah_count"
    if isinstance(answer, bool) or not isinstance(answer, int):
        raise ItemError(f"multiple-choice answer {answer!r} is not an option index")
    return LETTERS[answer], "letter", "mmniah_mc"


def _build(ctx: LoadContext, row: dict, images_root: Path, item_id: str, opts: dict) -> ChunkedItem:
    what = item_id
    images = need(row, "images_list", list, what)
    meta = row.get("meta") or {}
    context = need(row, "context", str, what).replace("</s>", "")
    question = need(row, "question", str, what)
    n_ctx = context.count(IMAGE_TOKEN)
    if n_ctx + question.count(IMAGE_TOKEN) != len(images):
        raise ItemError(
            f"{n_ctx} + {question.count(IMAGE_TOKEN)} <image> placeholders for {len(images)} images_list entries"
        )
    refs = [MediaRef("image", f"images_list[{i}]", path=images_root / p) for i, p in enumerate(images)]
    pieces = split_placeholders(context, IMAGE_TOKEN, n_ctx, "context")
    units = [Unit(pieces[i], refs[i]) for i in range(n_ctx)]
    if ctx.subset == "counting-image":
        if n_ctx < 2:
            raise ItemError(f"no B chunk: counting item has {n_ctx} context image(s)")
        b_start, b_end, where = n_ctx // 2, n_ctx, {"needle_locator": "halves"}
    else:
        b_start, where = _needle_index(meta, images, n_ctx, context, opts["needle_locator"])
        b_end = b_start + 1
    kept, after = (units[:b_end], "") if opts["after_b"] == "drop" else (units, pieces[-1])
    choice_paths = meta.get("choices_image_path") or []
    choice_media = [
        MediaRef("image", f"choices_image_path[{j}]", path=images_root / p)
        for j, p in enumerate(choice_paths)
    ]
    gold_norm, fmt, scorer = _gold(row["answer"], ctx.subset)
    item = ChunkedItem(
        benchmark="mm_niah",
        subset=ctx.subset,
        split=ctx.split,
        item_id=item_id,
        segments=interleaved_layout("", kept, b_start, b_end, opts["a_chunks"], after),
        question=question,
        choices=None if choice_media else (meta.get("choices") or None),
        choice_media=choice_media or None,
        gold=row["answer"],
        gold_norm=gold_norm,
        answer_format=fmt,
        scorer=scorer,
        cluster_key=item_id,
        prompt=PROMPT_OPEN if fmt == "list" else PROMPT_MC,
        question_media=refs[n_ctx:],
        meta={
            "id": row.get("id"),
            "placed_depth": meta.get("placed_depth"),
            "context_length": meta.get("context_length"),
            "num_images": meta.get("num_images"),
            "needles": meta.get("needles"),
            "b_images": list(range(b_start, b_end)),
            "dropped_media": [r.source_key for r in refs[b_end:n_ctx]] if opts["after_b"] == "drop" else [],
            **where,
        },
    )
    if fmt == "letter" and not item.n_choices:
        raise ItemError("multiple-choice item without options")
    dropped = set(item.meta["dropped_media"])
    item.validate(expected_media=[r.source_key for r in refs + choice_media if r.source_key not in dropped])
    return item


def rows(
    ctx: LoadContext,
    *,
    a_chunks: int | None = None,
    after_b: str = "query",
    needle_locator: str = "offset",
    max_context_length: int | None = None,
) -> Iterator[Row]:
    """Rows of ``mm_niah_<split>/annotations/<subset>.jsonl``."""
    if needle_locator not in ("offset", "count"):
        raise ValueError(f"needle_locator must be 'offset' or 'count', got {needle_locator!r}")
    if after_b not in ("query", "drop"):
        raise ValueError(f"after_b must be 'query' or 'drop', got {after_b!r}")
    ann = ctx.file(f"mm_niah_{ctx.split}/annotations/{ctx.subset}.jsonl")
    images_root = ctx.base / f"mm_niah_{ctx.split}" / "images"
    if not images_root.is_dir():
        raise ctx.missing(
            images_root, [f"mm_niah_{ctx.split}/images/ (unpacked images.tar.gz)"], "image root missing"
        )
    opts = {"a_chunks": a_chunks, "after_b": after_b, "needle_locator": needle_locator}
    for n, row in read_jsonl(ann, ctx.report, ann.name):
        if "id" not in row:
            ctx.report.skip(f"{ann.name}:line{n}", "record has no 'id'", "row")
            continue
        length = (row.get("meta") or {}).get("context_length")
        if row.get("answer") is None:
            ctx.report.filter("no gold answer (test labels are not released)")
            continue
        if max_context_length is not None and isinstance(length, int) and length > max_context_length:
            ctx.report.filter(f"meta.context_length > {max_context_length}")
            continue
        item_id = ctx.item_id(row["id"])
        yield Row(item_id, lambda row=row, item_id=item_id: _build(ctx, row, images_root, item_id, opts))


def write_fixture(root: Path, n: int = 3, seed: int = 0) -> Path:
    """``mm_niah_val`` with ``n`` rows per image task: haystacks of 4–5 images under ``images/obelics``,
    needles under ``images/needles``, image options under ``images/choices``; the retrieval needle is
    pasted (not listed) and located by ``placed_depth``; reasoning has two listed needles and a question image."""
    base = root / "mm_niah_val"
    img_dir = base / "images"
    tag = 0

    def image(rel: str) -> str:
        nonlocal tag
        tag += 1
        save_png(index_image(tag, (32, 32)), img_dir / rel)
        return rel

    for subset in SUBSETS:
        recs = []
        for i in range(n):
            n_img = 4 + (i + seed) % 2
            hay = [image(f"obelics/{subset}-{i}-{k}.png") for k in range(n_img)]
            texts = [f"Paragraph {k} of document {i}. " * 3 for k in range(n_img + 1)]
            rec_meta: dict = {
                "context_length": 500 + 100 * i,
                "num_images": n_img,
                "choices": None,
                "choices_image_path": None,
            }
            question = f"Question {i}?"
            if subset == "retrieval-image":
                needle_at = 1 + (i + seed) % (n_img - 1)
                rec_meta["choices_image_path"] = [image(f"choices/{i}-{c}.png") for c in range(4)]
                rec_meta["needles"] = [f"needles/cartoon-{i}.png"]
                answer: object = (i + seed) % 4
            elif subset == "reasoning-image":
                first, needle_at = 1, n_img - 1 - (i % 2)
                hay[first] = image(f"needles/blink-{i}-a.png")
                hay[needle_at] = image(f"needles/blink-{i}-b.png")
                rec_meta["needles"] = [hay[first], hay[needle_at]]
                rec_meta["choices"] = ["left", "right"]
                question = f"Which way does the camera move between the two views? {IMAGE_TOKEN}"
                hay.append(image(f"needles/blink-{i}-q.png"))
                answer = i % 2
            else:
                needle_at = 0
                answer = json.dumps([k % 3 for k in range(n_img)]) if i % 2 else [k % 3 for k in range(n_img)]
                rec_meta["needles"] = [f"needles/count-{i}.png"]
            context = "".join(t + IMAGE_TOKEN for t in texts[:n_img]) + texts[n_img] + "</s>"
            pos = [j for j in range(len(context)) if context.startswith(IMAGE_TOKEN, j)][needle_at]
            rec_meta["placed_depth"] = round(pos / len(context.replace("</s>", "")), 4)
            recs.append(
                {
                    "id": i,
                    "images_list": hay,
                    "context": context,
                    "question": question,
                    "answer": answer,
                    "meta": rec_meta,
                }
            )
        write_jsonl(recs, base / "annotations" / f"{subset}.jsonl")
    return root


SPEC = Benchmark(
    name="mm_niah",
    dir_name="MM-NIAH",
    published="https://huggingface.co/datasets/OpenGVLab/MM-NIAH (code: https://github.com/OpenGVLab/MM-NIAH)",
    expected_files=(
        "mm_niah_<split>/annotations/{retrieval,reasoning,counting}-image.jsonl",
        "mm_niah_<split>/images/ (unpacked images.tar.gz)",
    ),
    subsets=SUBSETS,
    default_subsets=("retrieval-image", "reasoning-image"),
    splits=("val", "test"),
    default_split="val",
    rows=rows,
    fixture=write_fixture,
    licence="MIT (HF card)",
)
