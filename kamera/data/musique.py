"""MuSiQue-Ans 2-hop (text control): the two supporting paragraphs become A and B.

Published: github.com/StonyBrookNLP/musique (data via its download script; jsonl mirrors on HF, e.g.
``bdsaglam/musique``), licence CC BY 4.0.
Layout: ``<root>/data/musique_ans_v1.0_{dev,train}.jsonl`` (also accepted directly under ``<root>``).
Row: ``id`` ("2hop__…"), ``paragraphs`` [{idx, title, paragraph_text, is_supporting}] (20, titles repeat),
``question``, ``question_decomposition`` [{id, question, answer, paragraph_support_idx}], ``answer``,
``answer_aliases`` (may be empty), ``answerable``.
Recipe: keep answerable ``2hop__`` rows; A = the paragraph whose ``idx`` equals the first hop's
``paragraph_support_idx``, B = the second hop's; paragraphs are looked up by ``idx`` (never by title).
Variants: ``order="reversed"`` swaps A and B; ``n_distractors=k`` adds k non-supporting paragraphs as
filler A chunks, placed with A in paragraph-``idx`` order.
Prompt: MuSiQue has no reference LLM prompt; this harness uses the instruction below as the prefix and
``Question: …\\nAnswer:`` as the query (harness-defined). Scoring: answer EM / F1 over answer + aliases
(``evaluate_v1.0.py``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from kamera.data.base import Benchmark, LoadContext, need, read_jsonl
from kamera.data.errors import ItemError
from kamera.data.fixtures import write_jsonl
from kamera.data.schema import (
    ChunkedItem,
    PromptTemplate,
    Unit,
    evidence_layout,
    pick_distractors,
    variant_suffix,
)
from kamera.data.scorers import squad_normalise
from kamera.data.selection import Row

PROMPT = PromptTemplate(
    source="harness-defined (MuSiQue ships no LLM prompt); query form from shared/notes/benchmarks.md",
    prefix="Answer the question using the paragraphs below. Reply with a short answer only.\n\n",
    question="Question: {question}\nAnswer:",
)


def _paragraph_unit(p: dict) -> Unit:
    return Unit(f"{p.get('title', '')}\n{p.get('paragraph_text', '')}\n\n")


def _build(ctx: LoadContext, rec: dict, item_id: str, order: str, n_distractors: int) -> ChunkedItem:
    rid = rec["id"]
    paragraphs = need(rec, "paragraphs", list, rid)
    by_idx = {p.get("idx"): p for p in paragraphs if isinstance(p, dict)}
    hops = need(rec, "question_decomposition", list, rid)
    if len(hops) != 2:
        raise ItemError(f"{rid}: {len(hops)} decomposition steps, expected 2")
    support = [h.get("paragraph_support_idx") for h in hops]
    if support[1] is None or support[1] not in by_idx:
        raise ItemError(
            f"no B chunk: second hop's paragraph_support_idx {support[1]!r} matches no paragraph idx"
        )
    if support[0] is None or support[0] not in by_idx:
        raise ItemError(
            f"no A chunk: first hop's paragraph_support_idx {support[0]!r} matches no paragraph idx"
        )
    if support[0] == support[1]:
        raise ItemError(f"both hops are supported by paragraph {support[0]}: no separate A and B")
    others = sorted(i for i in by_idx if i not in support)
    fillers = pick_distractors(others, n_distractors, item_id)
    segments = evidence_layout(
        PROMPT.prefix,
        (support[0], [_paragraph_unit(by_idx[support[0]])]),
        (support[1], [_paragraph_unit(by_idx[support[1]])]),
        [(i, [_paragraph_unit(by_idx[i])]) for i in fillers],
        order,
    )
    answer = need(rec, "answer", str, rid)
    aliases = [a for a in rec.get("answer_aliases") or [] if isinstance(a, str)]
    bridge = str(hops[0].get("answer", ""))
    b_text = by_idx[support[1] if order == "forward" else support[0]].get("paragraph_text", "")
    item = ChunkedItem(
        benchmark="musique",
        subset=ctx.subset,
        split=ctx.split,
        item_id=item_id,
        segments=segments,
        question=need(rec, "question", str, rid),
        choices=None,
        choice_media=None,
        gold=answer,
        gold_norm=[squad_normalise(a) for a in [answer, *aliases]],
        answer_format="str",
        scorer="musique_em_f1",
        cluster_key=rid,
        prompt=PROMPT,
        meta={
            "answer_aliases": aliases,
            "support_idx": support,
            "hop_questions": [h.get("question") for h in hops],
            "bridge_answer": bridge,
            "bridge_in_b": bool(bridge) and bridge.lower() in b_text.lower(),
            "order": order,
            "distractor_idx": fillers,
        },
    )
    item.validate(expected_media=[])
    return item


def rows(ctx: LoadContext, *, order: str = "forward", n_distractors: int = 0) -> Iterator[Row]:
    """Eligible rows: answerable ``2hop__`` records of the split's jsonl."""
    name = f"musique_ans_v1.0_{ctx.split}.jsonl"
    path = ctx.file(f"data/{name}", name)
    suffix = variant_suffix(order, n_distractors)
    for n, rec in read_jsonl(path, ctx.report, name):
        rid = rec.get("id")
        if not isinstance(rid, str):
            ctx.report.skip(f"{name}:line{n}", "record has no string 'id'", "row")
        elif not rid.startswith("2hop__"):
            ctx.report.filter("not 2-hop")
        elif rec.get("answerable") is False:
            ctx.report.filter("unanswerable")
        else:
            item_id = ctx.item_id(rid, suffix)
            yield Row(
                item_id, lambda rec=rec, item_id=item_id: _build(ctx, rec, item_id, order, n_distractors)
            )


def write_fixture(root: Path, n: int = 3, seed: int = 0) -> Path:
    """``data/musique_ans_v1.0_dev.jsonl`` with ``n`` answerable 2-hop rows (20 paragraphs, repeated
    titles, "#1" second hops), plus one 3-hop and one unanswerable 2-hop row the recipe excludes."""
    rng = random.Random(seed)
    recs = []
    for i in range(n + 2):
        hop = 3 if i == n else 2
        support = rng.sample(range(20), 2)
        person, city = f"Person{i}", f"City{i}"
        paragraphs = [
            {
                "idx": j,
                "title": f"Topic {j % 3}",
                "paragraph_text": f"Filler fact {j} about topic {j % 3}.",
                "is_supporting": j in support,
            }
            for j in range(20)
        ]
        paragraphs[support[0]]["paragraph_text"] = f"The novel Book{i} was written by {person}."
        paragraphs[support[1]]["paragraph_text"] = f"{person} was born in {city} in 19{50 + i}."
        first = {
            "id": 100 + i,
            "question": f"Book{i} >> author",
            "answer": person,
            "paragraph_support_idx": support[0],
        }
        second = {
            "id": 200 + i,
            "question": "#1 >> place of birth",
            "answer": city,
            "paragraph_support_idx": support[1],
        }
        recs.append(
            {
                "id": f"{hop}hop__{100 + i}_{200 + i}",
                "paragraphs": paragraphs,
                "question": f"Where was the author of Book{i} born?",
                "question_decomposition": [first, second],
                "answer": city,
                "answer_aliases": [f"{city}, Country"] if i % 2 else [],
                "answerable": i != n + 1,
            }
        )
    write_jsonl(recs, root / "data" / "musique_ans_v1.0_dev.jsonl")
    return root


SPEC = Benchmark(
    name="musique",
    dir_name="MuSiQue",
    published="https://github.com/StonyBrookNLP/musique (jsonl mirror: https://huggingface.co/datasets/bdsaglam/musique)",
    expected_files=("data/musique_ans_v1.0_dev.jsonl (or musique_ans_v1.0_<split>.jsonl at the root)",),
    subsets=("2hop",),
    default_subsets=("2hop",),
    splits=("dev", "train"),
    default_split="dev",
    rows=rows,
    fixture=write_fixture,
    licence="CC BY 4.0",
)
