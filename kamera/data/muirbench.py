"""MuirBench multi-image multiple choice: the last image is B, the images before it are A.

Published: huggingface.co/datasets/MUIRBENCH/MUIRBENCH (cc-by-4.0), parquet ``data/test-*.parquet``
with the images embedded (``image_list``: a list of HF ``Image`` structs ``{bytes, path}``); 2,600
questions, split ``test``. Code: github.com/muirbench/MuirBench.
Row (lmms-eval ``tasks/muirbench/utils.py``): ``idx``, ``task``, ``image_relation``, ``image_type``,
``question``, ``options`` (list[str]), ``answer`` (a letter), ``image_list``, ``counterpart_idx``.
Recipe: keep items with at least two images and text-only options (an option holding ``<image>`` is an
image option: excluded). A = ``image_list[:-1]`` (one chunk per image, or ``a_chunks`` groups),
B = ``image_list[-1]``; the query is the question with its k-th ``<image>`` tag written "Image k"
(the tag count must be 0 or the image count), then the options. ``tasks`` filters by task name.
Prompt (lmms-eval): the images, then ``f"{question}\\nA. …\\nB. …"`` + "\\nAnswer with the option's letter
from the given choices directly."; scored by the option letter. ``cluster_key`` pairs an item with its
``counterpart_idx`` twin (the unanswerable control), so both fall in one cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kamera.data.base import Benchmark, LoadContext, need, read_parquet
from kamera.data.errors import ItemError
from kamera.data.fixtures import index_image, png_bytes
from kamera.data.schema import (
    IMAGE_TOKEN,
    LETTERS,
    ChunkedItem,
    MediaRef,
    PromptTemplate,
    Unit,
    interleaved_layout,
)
from kamera.data.selection import Row

PROMPT = PromptTemplate(
    source="EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/muirbench/utils.py:muir_doc_to_text + muirbench.yaml",
    post="\nAnswer with the option's letter from the given choices directly.",
)


def _image_ref(entry: object, i: int, root: Path) -> MediaRef:
    """A lazy reference to one embedded image (bytes), or to its file when only a path is stored."""
    key = f"image_list[{i}]"
    if isinstance(entry, dict) and entry.get("bytes"):
        return MediaRef("image", key, data=entry["bytes"])
    if isinstance(entry, dict) and entry.get("path"):
        return MediaRef("image", key, path=root / entry["path"])
    raise ItemError(f"{key} holds neither image bytes nor a path")


def _label_images(question: str, n_images: int) -> str:
    """The question with its k-th ``<image>`` tag written "Image k"."""
    n_tags = question.count(IMAGE_TOKEN)
    if n_tags not in (0, n_images):
        raise ItemError(f"question has {n_tags} {IMAGE_TOKEN} tags for {n_images} images")
    pieces = question.split(IMAGE_TOKEN)
    return pieces[0] + "".join(f"Image {k}{p}" for k, p in enumerate(pieces[1:], 1))


def _build(ctx: LoadContext, row: dict, item_id: str, a_chunks: int | None) -> ChunkedItem:
    images = [_image_ref(e, i, ctx.base) for i, e in enumerate(need(row, "image_list", list, item_id))]
    options = [str(o) for o in need(row, "options", list, item_id)]
    answer = need(row, "answer", str, item_id).strip().upper()
    if answer not in LETTERS[: len(options)]:
        raise ItemError(f"answer {row['answer']!r} is not an option letter for {len(options)} options")
    n = len(images)
    counterpart = row.get("counterpart_idx")
    twins = sorted(str(x) for x in (row.get("idx"), counterpart) if x not in (None, "", -1, "-1"))
    item = ChunkedItem(
        benchmark="muirbench",
        subset=ctx.subset,
        split=ctx.split,
        item_id=item_id,
        segments=interleaved_layout("", [Unit("", r) for r in images], n - 1, n, a_chunks),
        question=_label_images(need(row, "question", str, item_id), n),
        choices=options,
        choice_media=None,
        gold=row["answer"],
        gold_norm=answer,
        answer_format="letter",
        scorer="mc_letter",
        cluster_key="+".join(twins) or item_id,
        prompt=PROMPT,
        meta={k: row.get(k) for k in ("idx", "task", "image_relation", "image_type", "counterpart_idx")}
        | {"n_images": n},
    )
    item.validate(expected_media=[f"image_list[{i}]" for i in range(n)])
    return item


def rows(ctx: LoadContext, *, a_chunks: int | None = None, tasks: list[str] | None = None) -> Iterator[Row]:
    """Eligible rows of ``data/<split>-*.parquet``: ≥ 2 images, text options, task in ``tasks``."""
    files = ctx.glob(f"data/{ctx.split}-*.parquet")
    for n, row in enumerate(read_parquet(files)):
        native = row.get("idx", f"row{n}")
        images, options = row.get("image_list") or [], row.get("options") or []
        if tasks is not None and row.get("task") not in tasks:
            ctx.report.filter("task not selected")
        elif len(images) < 2:
            ctx.report.filter("fewer than 2 images")
        elif any(IMAGE_TOKEN in str(o) for o in options):
            ctx.report.filter("image options")
        else:
            item_id = ctx.item_id(native)
            yield Row(item_id, lambda row=row, item_id=item_id: _build(ctx, row, item_id, a_chunks))


def write_fixture(root: Path, n: int = 3, seed: int = 0) -> Path:
    """``data/test-00000-of-00001.parquet`` written by ``datasets`` with an ``image_list`` of embedded
    images (as on the Hub): ``n`` eligible items of 2–4 images, one single-image item and one item with
    image options (both excluded by the recipe); each eligible item has an unanswerable counterpart id."""
    import datasets

    text_fields = ("idx", "task", "image_relation", "image_type", "question", "answer", "counterpart_idx")
    recs: dict[str, list] = {k: [] for k in (*text_fields, "options", "image_list")}
    for i in range(n + 2):
        n_img = 1 if i == n else 2 + (i + seed) % 3
        tagged = i % 2 == 0
        question = "Which image shows the scene after the change? " + (
            " ".join([IMAGE_TOKEN] * n_img) if tagged else ""
        )
        options = (
            [f"{IMAGE_TOKEN}" for _ in range(4)]
            if i == n + 1
            else [f"Image {k + 1}" for k in range(n_img)] + ["None of the choices provided"]
        )
        row = {
            "idx": f"{i:04d}",
            "task": "Image-Text Matching" if i % 2 else "Temporal Ordering",
            "image_relation": "Temporal",
            "image_type": "Photograph",
            "question": question,
            "options": options,
            "answer": LETTERS[(i + seed) % len(options)],
            "image_list": [
                {"bytes": png_bytes(index_image(10 * i + k, (32, 32))), "path": None} for k in range(n_img)
            ],
            "counterpart_idx": f"{i + 100:04d}",
        }
        for k, v in row.items():
            recs[k].append(v)
    features = datasets.Features(
        {
            **{k: datasets.Value("string") for k in text_fields},
            "options": datasets.List(datasets.Value("string")),
            "image_list": datasets.List(datasets.Image()),
        }
    )
    (root / "data").mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(recs, features=features).to_parquet(
        str(root / "data" / "test-00000-of-00001.parquet")
    )
    return root


SPEC = Benchmark(
    name="muirbench",
    dir_name="MuirBench",
    published="https://huggingface.co/datasets/MUIRBENCH/MUIRBENCH (code: https://github.com/muirbench/MuirBench)",
    expected_files=("data/test-*.parquet (images embedded in image_list)",),
    subsets=("all",),
    default_subsets=("all",),
    splits=("test",),
    default_split="test",
    rows=rows,
    fixture=write_fixture,
    licence="CC BY 4.0",
)
