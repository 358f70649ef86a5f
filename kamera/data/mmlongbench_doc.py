"""MMLongBench-Doc two-page multi-hop document QA: evidence page e1 is A, page e2 is B.

Published: github.com/mayubo2333/MMLongBench-Doc (``data/samples.json`` + ``data/documents/*.pdf``)
and huggingface.co/datasets/yubo2333/MMLongBench-Doc (``data/train-*.parquet`` + ``documents/*.pdf``);
data CC BY-NC 4.0. Either layout is read (the GitHub one first).
Row: ``doc_id`` (PDF file name), ``doc_type``, ``question``, ``answer``, ``evidence_pages`` (a string
holding a Python list literal, 1-based, e.g. ``"[19, 20]"``), ``evidence_sources`` (likewise),
``answer_format`` (Int / Float / Str / List / None). List answers are list literals in a string too.
Recipe: keep rows with exactly two distinct evidence pages and an answer other than "Not answerable";
pages are rendered with PyMuPDF at 144 dpi (as lmms-eval) and cached; A = page e1, B = page e2 (e1 < e2).
Subset ``one_page`` (the single-hop control of Table 4, §1: "single-hop accuracy is unchanged under
reuse"): rows with exactly one evidence page e; B = e and A = one other page of the document, chosen
deterministically from the item id, so the answer is read from B alone.
Variants: ``order="reversed"`` (A = e2, B = e1); ``n_distractors=k`` adds k non-evidence pages as
filler A chunks, placed with e1 in page order (all before B).
Prompt (lmms-eval ``mmlongbench_doc.yaml``): the evidence pages, then the question and
"\\nAnswer with a single word or phrase. If the answer is not in the document, answer 'Not answerable'."
Scoring: lmms-eval's rule-only scorer by answer format (``scorers.mmlongbench_score``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from kamera.data.base import Benchmark, LoadContext, need, read_json, read_parquet
from kamera.data.errors import ItemError
from kamera.data.fixtures import write_parquet, write_pdf
from kamera.data.media import PDF_DPI, pdf_page_count
from kamera.data.schema import (
    ChunkedItem,
    MediaRef,
    PromptTemplate,
    Unit,
    evidence_layout,
    pick_distractors,
    variant_suffix,
)
from kamera.data.scorers import mmlb_normalise, parse_literal_list
from kamera.data.selection import Row

ONE_PAGE = "one_page"
PROMPT = PromptTemplate(
    source="EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/mmlongbench_doc/mmlongbench_doc.yaml (post_prompt)",
    post="\nAnswer with a single word or phrase. If the answer is not in the document, answer 'Not answerable'.",
)


def _pages(row: dict) -> list[int]:
    """The row's evidence pages as sorted distinct ints (ItemError on a non-integer page)."""
    try:
        return sorted({int(p) for p in parse_literal_list(row.get("evidence_pages"))})
    except (TypeError, ValueError) as e:
        raise ItemError(f"evidence_pages {row.get('evidence_pages')!r} is not a list of page numbers") from e


def _build(
    ctx: LoadContext, row: dict, docs: Path, item_id: str, order: str, n_distractors: int, dpi: int
) -> ChunkedItem:
    doc_id = need(row, "doc_id", str, item_id)
    pdf = docs / doc_id
    if not pdf.exists():
        raise ItemError(f"document missing: {pdf}")
    n_pages = pdf_page_count(pdf)
    evidence = _pages(row)
    if evidence[-1] > n_pages or evidence[0] < 1:
        raise ItemError(f"no B chunk: evidence pages {evidence} outside the PDF's {n_pages} pages")
    if ctx.subset == ONE_PAGE:  # A = a page without the evidence, B = the evidence page
        others = [p for p in range(1, n_pages + 1) if p != evidence[0]]
        e1, e2 = pick_distractors(others, 1, f"{item_id}#A")[0], evidence[0]
    else:
        e1, e2 = evidence
    fillers = pick_distractors(
        [p for p in range(1, n_pages + 1) if p not in (e1, e2)], n_distractors, item_id
    )

    def page(p: int) -> tuple[int, list[Unit]]:
        return p, [
            Unit("", MediaRef("pdf_page", f"page[{p}]", path=pdf, page=p, dpi=dpi, cache_dir=ctx.cache_dir))
        ]

    fmt = str(row.get("answer_format") or "Str")
    answer = need(row, "answer", str, item_id)
    item = ChunkedItem(
        benchmark="mmlongbench_doc",
        subset=ctx.subset,
        split=ctx.split,
        item_id=item_id,
        segments=evidence_layout("", page(e1), page(e2), [page(p) for p in fillers], order),
        question=need(row, "question", str, item_id),
        choices=None,
        choice_media=None,
        gold=answer,
        gold_norm=mmlb_normalise(answer, fmt),
        answer_format=fmt.lower(),
        scorer="mmlongbench_rule",
        cluster_key=doc_id,
        prompt=PROMPT,
        meta={
            "doc_id": doc_id,
            "doc_type": row.get("doc_type"),
            "evidence_pages": evidence,
            "a_page": e1,
            "evidence_sources": parse_literal_list(row.get("evidence_sources")),
            "answer_format_raw": fmt,
            "n_doc_pages": n_pages,
            "page_gap": e2 - e1,
            "order": order,
            "distractor_pages": fillers,
            "dpi": dpi,
        },
    )
    item.validate(expected_media=[f"page[{p}]" for p in (e1, e2, *fillers)])
    return item


def _read_rows(ctx: LoadContext) -> tuple[list[dict], Path]:
    """Annotation rows and the documents folder of whichever layout is present."""
    github = ctx.base / "data" / "samples.json"
    if github.exists():
        rows = read_json(github, "MMLongBench-Doc samples.json")
        if not isinstance(rows, list):
            raise ValueError(f"{github}: expected a JSON array of records")
        return rows, ctx.base / "data" / "documents"
    try:
        parquet = ctx.glob(f"data/{ctx.split}-*.parquet")
    except FileNotFoundError:
        raise ctx.missing(
            github, list(SPEC.expected_files), "no annotation file (GitHub or HF layout)"
        ) from None
    return read_parquet(parquet), ctx.base / "documents"


def rows(
    ctx: LoadContext, *, order: str = "forward", n_distractors: int = 0, dpi: int = PDF_DPI
) -> Iterator[Row]:
    """Eligible rows: exactly two evidence pages and an answerable answer."""
    records, docs = _read_rows(ctx)
    if not docs.is_dir():
        raise ctx.missing(
            docs, ["data/documents/<doc_id> (GitHub) or documents/<doc_id> (HF)"], "documents folder missing"
        )
    suffix = variant_suffix(order, n_distractors)
    seen: Counter[str] = Counter()
    for n, row in enumerate(records):
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("doc_id"), str)
            or not isinstance(row.get("question"), str)
        ):
            ctx.report.skip(f"record{n}", "record lacks a string doc_id or question", "row")
            continue
        try:
            pages = _pages(row)
        except ItemError as e:
            ctx.report.skip(f"record{n}", str(e), "row")
            continue
        answer = str(row.get("answer", ""))
        if str(row.get("answer_format")) == "None" or answer.strip().lower() == "not answerable":
            ctx.report.filter("not answerable")
        elif len(pages) != (1 if ctx.subset == ONE_PAGE else 2):
            ctx.report.filter(f"{len(pages)} evidence pages")
        else:
            digest = hashlib.sha1(json.dumps([row["question"], answer, pages]).encode()).hexdigest()[:10]
            native = f"{row['doc_id']}#{digest}"
            seen[native] += 1
            native += f"~{seen[native]}" if seen[native] > 1 else ""
            item_id = ctx.item_id(native, suffix)
            yield Row(
                item_id,
                lambda row=row, item_id=item_id: _build(ctx, row, docs, item_id, order, n_distractors, dpi),
            )


def write_fixture(root: Path, n: int = 3, seed: int = 0, layout: str = "github") -> Path:
    """``n`` two-page answerable rows over two multi-page PDFs, plus a one-page, a three-page and an
    unanswerable row, written as the GitHub layout (``data/samples.json``, 4-space indent, string-encoded
    lists) or the HF layout (``data/train-00000-of-00001.parquet`` + ``documents/``)."""
    docs = ["report-a.pdf", "brochure-b.pdf"]
    formats = [
        ("Int", "12"),
        ("Float", "18.29%"),
        ("Str", "Latinos interviewed by cellphone"),
        ("List", "['White', '10%']"),
    ]
    records = []
    for i in range(n):
        fmt, answer = formats[(i + seed) % len(formats)]
        e1 = 1 + (i + seed) % 3
        records.append(
            {
                "doc_id": docs[i % 2],
                "doc_type": "Research report / Introduction",
                "question": f"Two-page question {i}?",
                "answer": answer,
                "evidence_pages": f"[{e1}, {e1 + 2 + i % 2}]",
                "evidence_sources": "['Table', 'Chart']",
                "answer_format": fmt,
            }
        )
    records += [
        {
            "doc_id": docs[0],
            "doc_type": "Guidebook",
            "question": "One-page question?",
            "answer": "5",
            "evidence_pages": "[2]",
            "evidence_sources": "['Chart']",
            "answer_format": "Int",
        },
        {
            "doc_id": docs[1],
            "doc_type": "Guidebook",
            "question": "Three-page question?",
            "answer": "7",
            "evidence_pages": "[1, 3, 5]",
            "evidence_sources": "['Pure-text (Plain-text)']",
            "answer_format": "Int",
        },
        {
            "doc_id": docs[0],
            "doc_type": "Guidebook",
            "question": "Unanswerable question?",
            "answer": "Not answerable",
            "evidence_pages": "[]",
            "evidence_sources": "[]",
            "answer_format": "None",
        },
    ]
    doc_dir = root / ("data/documents" if layout == "github" else "documents")
    for name in docs:
        write_pdf(doc_dir / name, 7)
    if layout == "github":
        (root / "data" / "samples.json").write_text(json.dumps(records, indent=4), encoding="utf-8")
    elif layout == "hf":
        write_parquet(records, root / "data" / "train-00000-of-00001.parquet")
    else:
        raise ValueError(f"layout must be 'github' or 'hf', got {layout!r}")
    return root


SPEC = Benchmark(
    name="mmlongbench_doc",
    dir_name="MMLongBench-Doc",
    published="https://github.com/mayubo2333/MMLongBench-Doc ; https://huggingface.co/datasets/yubo2333/MMLongBench-Doc",
    expected_files=(
        "data/samples.json + data/documents/<doc_id>.pdf (GitHub)",
        "or data/train-*.parquet + documents/<doc_id>.pdf (HF)",
    ),
    subsets=("two_page", ONE_PAGE),
    default_subsets=("two_page",),
    splits=("train",),
    default_split="train",
    rows=rows,
    fixture=write_fixture,
    licence="CC BY-NC 4.0 (data)",
)
