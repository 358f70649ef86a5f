"""Each loader on its fixture: item count, exact A/B/query cut, the reference prompt reproduced, media
resolved and decodable (frames and pages checked by the index they show), gold normalised, scorer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from kamera.data import IMAGE_TOKEN, ChunkedItem, MediaRef, load_items, score
from kamera.data.fixtures import read_index
from kamera.data.mm_niah import _needle_index
from kamera.items.spans import Clip, validate_spans


def roles(item: ChunkedItem) -> list[tuple[str, str, int]]:
    return [(s.role, s.name, s.n_images) for s in item.spans()]


def refs_of(item: ChunkedItem, role: str) -> list[MediaRef]:
    return [s.media for s in item.segments if s.role == role and s.media is not None]


def check_common(item: ChunkedItem) -> None:
    """Span shape, decodable media, and the gold scoring right and a wrong answer wrong."""
    spans = item.spans()
    validate_spans(spans)
    pictures = [
        f for s in spans for p in s.parts if not isinstance(p, str) for f in (p.frames if isinstance(p, Clip) else (p,))
    ]
    assert all(isinstance(p, Image.Image) and p.mode == "RGB" for p in pictures)
    assert len(pictures) == sum(s.n_images + s.n_frames for s in spans) == len(item.media_refs())
    if item.answer_format == "letter":
        wrong = next(c for c in item.choice_letters if c != item.gold_letter)
        assert score(item, item.gold_letter) == 1.0
        assert score(item, f"The answer is {wrong}.") == 0.0


# --------------------------------------------------------------------------------------------- MM-NIAH


def test_mm_niah(bench_root) -> None:
    root = bench_root("mm_niah")
    items = load_items("mm_niah", root=root, subset="retrieval-image,reasoning-image,counting-image")
    assert len(items) == 9 and items.report.skipped == []
    raw = {
        (sub, r["id"]): r
        for sub in ("retrieval-image", "reasoning-image", "counting-image")
        for r in map(json.loads, (root / f"mm_niah_val/annotations/{sub}.jsonl").read_text().splitlines())
    }
    for item in items:
        row = raw[(item.subset, item.meta["id"])]
        check_common(item)
        n_ctx = row["context"].count(IMAGE_TOKEN)
        b_refs, a_refs = refs_of(item, "B"), refs_of(item, "A")
        if item.subset == "counting-image":
            assert [r.source_key for r in b_refs] == [f"images_list[{i}]" for i in range(n_ctx // 2, n_ctx)]
            assert item.gold_norm == [k % 3 for k in range(n_ctx)]  # JSON-string answers parsed too
            assert score(item, json.dumps(item.gold_norm)) == 1.0
        else:
            (b,) = b_refs
            if item.subset == "reasoning-image":  # last listed needle, found by path
                assert item.meta["needle_locator"] == "path"
                assert b.path.name == Path(row["meta"]["needles"][-1]).name
                assert [r.source_key for r in item.question_media] == [f"images_list[{n_ctx}]"]
            else:  # pasted needle, found by placed_depth; the fixture put it at 1 + id % (n - 1)
                assert item.meta["needle_locator"] == "offset"
                assert b.source_key == f"images_list[{1 + row['id'] % (n_ctx - 1)}]"
                assert [r.source_key for r in item.choice_media] == [f"choices_image_path[{j}]" for j in range(4)]
            assert [r.source_key for r in a_refs] == [f"images_list[{i}]" for i in range(int(b.source_key[12:-1]))]
            assert item.gold_letter == "ABCD"[row["answer"]]
        # the prompt is the reference f"{context}\n{question}" + options + post-prompt, images in place
        opts = row["meta"]["choices"] or ([IMAGE_TOKEN] * len(row["meta"]["choices_image_path"] or []))
        ref = row["context"].replace("</s>", "") + "\n" + row["question"]
        ref += "".join(f"\n{'ABCD'[j]}. {o}" for j, o in enumerate(opts)) + item.prompt.post
        assert item.render_text() == ref
        assert len(a_refs) == len([s for s in item.spans() if s.role == "A"])  # one A span per image


def test_mm_niah_after_b_and_grouping(bench_root) -> None:
    root = bench_root("mm_niah")
    full = {i.item_id: i for i in load_items("mm_niah", root=root, subset="retrieval-image")}
    for item in load_items("mm_niah", root=root, subset="retrieval-image", after_b="drop", a_chunks=1):
        assert [s.role for s in item.spans()] == ["A", "B", "query"]
        assert not any(s.role == "after" for s in item.segments)
        n_all = len(full[item.item_id].media_refs())
        assert len(item.media_refs()) + len(item.meta["dropped_media"]) == n_all


def test_mm_niah_needle_locators_agree_on_fixture() -> None:
    context = "t0 <image> t1 <image> t2 <image> t3 <image> end"
    depth = context.index(IMAGE_TOKEN, 12) / len(context)
    images = [f"i{k}.png" for k in range(4)]
    assert _needle_index({"placed_depth": depth}, images, 4, context, "offset")[0] == 1
    assert _needle_index({"needles": ["i2.png"], "placed_depth": depth}, images, 4, context, "offset")[0] == 2


# ------------------------------------------------------------------------------------------- MileBench


def test_milebench(bench_root) -> None:
    root = bench_root("milebench")
    items = load_items("milebench", root=root)
    assert len(items) == 12 and {i.subset for i in items} == {
        "ActionSequence",
        "ActionPrediction",
        "ObjectShuffle",
        "StateChange",
    }
    for item in items:
        check_common(item)
        doc = json.loads((root / item.subset / f"{item.subset}.json").read_text())
        row = doc["data"][item.meta["sample_id"]]
        n = len(row["task_instance"]["images_path"])
        b = min(4, n - n // 2) if item.subset == "ActionPrediction" else n - n // 2
        assert [r.source_key for r in refs_of(item, "B")] == [f"images_path[{i}]" for i in range(n - b, n)]
        assert [s.role for s in item.spans()] == ["prefix", *["A"] * (n - b), "B", "query"]
        frames = [read_index(r.load()) for r in refs_of(item, "A") + refs_of(item, "B")]
        assert frames == list(range(n))  # images in images_path order
        assert item.gold_letter == "ABCD"[row["task_instance"]["choice_list"].index(row["response"])]
        assert score(item, row["response"]) == 1.0  # the option text itself
        instr = doc["meta_data"]["task_instruction"][row["task_instruction_id"]]
        ctx = re.sub(r"\{image#\d+\}", IMAGE_TOKEN, row["task_instance"]["context"])
        choices = "".join(f"\n{'ABCD'[k]}. {c}" for k, c in enumerate(row["task_instance"]["choice_list"]))
        assert item.render_text() == f"{instr}\n{ctx}\nChoice list: {choices}\nYour answer is: "


def test_milebench_b_frames_and_a_chunks(bench_root) -> None:
    items = load_items("milebench", root=bench_root("milebench"), subset="StateChange", b_frames=1, a_chunks=2)
    for item in items:
        assert len(refs_of(item, "B")) == 1
        assert [s.role for s in item.spans()] == ["prefix", "A", "A", "B", "query"]


# ------------------------------------------------------------------------------------------- MuirBench


def test_muirbench(bench_root) -> None:
    root = bench_root("muirbench")
    items = load_items("muirbench", root=root)
    assert len(items) == 3
    assert items.report.filtered == {"fewer than 2 images": 1, "image options": 1}
    rows = {r["idx"]: r for r in pq.read_table(next((root / "data").glob("*.parquet"))).to_pylist()}
    for item in items:
        check_common(item)
        row = rows[item.meta["idx"]]
        n = len(row["image_list"])
        assert [s.role for s in item.spans()] == [*["A"] * (n - 1), "B", "query"]
        assert refs_of(item, "B")[0].source_key == f"image_list[{n - 1}]"
        assert [read_index(r.load()) for r in item.media_refs()] == [10 * int(row["idx"]) + k for k in range(n)]
        question = row["question"]
        for k in range(1, n + 1):
            question = question.replace(IMAGE_TOKEN, f"Image {k}", 1)
        opts = "".join(f"\n{'ABCDEF'[k]}. {o}" for k, o in enumerate(row["options"]))
        assert item.render_text() == IMAGE_TOKEN * n + question + opts + item.prompt.post
        assert item.cluster_key == "+".join(sorted([row["idx"], row["counterpart_idx"]]))


# ------------------------------------------------------------------------------- Video-MME / EgoSchema


def check_video(item: ChunkedItem, n_frames: int) -> None:
    a, b = refs_of(item, "A"), refs_of(item, "B")
    assert len(a) == n_frames // 2 and len(b) == n_frames - n_frames // 2
    idx = item.meta["frame_indices"]
    assert [r.frame_index for r in a + b] == idx and idx == sorted(set(idx)) and idx[0] == 0
    assert idx[-1] == item.meta["video_frames"] - 1
    assert [read_index(r.load()) for r in a + b] == idx  # the decoded frame is the frame asked for
    # each chunk of frames reaches the model as one clip, with the frames' times in the video
    clips = [p for s in item.spans() if s.role in ("A", "B") for p in s.parts if isinstance(p, Clip)]
    assert [f.size for c in clips for f in c.frames] == [r.load().size for r in a + b]
    assert [t for c in clips for t in c.timestamps] == pytest.approx([i / item.meta["fps"] for i in idx])


def test_videomme(bench_root, monkeypatch: pytest.MonkeyPatch) -> None:
    root = bench_root("videomme")
    items = load_items("videomme", root=root, n_frames=8)
    assert len(items) == 9 and {i.subset for i in items} == {"short", "medium", "long"}
    rows = {r["question_id"]: r for r in pq.read_table(root / "videomme/test-00000-of-00001.parquet").to_pylist()}
    for item in items:
        check_common(item)
        check_video(item, 8)
        row = rows[item.meta["question_id"]]
        assert item.cluster_key == row["videoID"] and item.choices == [o[3:] for o in row["options"]]
        assert (
            item.render_text()
            == IMAGE_TOKEN * 8
            + item.prompt.query_lead
            + row["question"]
            + "\n"
            + "\n".join(row["options"])
            + "\nThe best answer is:"
        )
    # frames are cached: a second pass decodes nothing
    monkeypatch.setattr("kamera.data.media._decode_frames_to_cache", lambda *a: pytest.fail("decoded twice"))
    items[0].spans()
    assert len(load_items("videomme", root=root, subset="short", task_types=["Counting Problem"], n_frames=8)) == 3


def test_videomme_default_frames_and_grouping(bench_root) -> None:
    (item,) = load_items("videomme", root=bench_root("videomme"), subset="long", n_items=1, a_chunks=4)
    check_video(item, 32)
    assert [s.role for s in item.spans()] == ["A", "A", "A", "A", "B", "query"]


@pytest.mark.parametrize("layout", ["hf", "github"])
def test_egoschema(layout: str, bench_root, fresh) -> None:
    root = bench_root("egoschema") if layout == "hf" else fresh("egoschema", layout="github")
    items = load_items("egoschema", root=root, n_frames=6)
    assert len(items) == 3
    if layout == "github":
        assert items.report.filtered == {"no public answer": 1}
    for item in items:
        check_common(item)
        check_video(item, 6)
        assert item.n_choices == 5 and item.choices[0].startswith("Activity")
        assert item.gold_letter == "ABCDE"[int(item.gold)]
        assert item.render_text().endswith("\nE. " + item.choices[4] + item.prompt.post)


# ------------------------------------------------------------------------------------- MMLongBench-Doc


@pytest.mark.parametrize("layout", ["github", "hf"])
def test_mmlongbench_doc(layout: str, bench_root, fresh) -> None:
    root = bench_root("mmlongbench_doc") if layout == "github" else fresh("mmlongbench_doc", layout="hf")
    items = load_items("mmlongbench_doc", root=root)
    assert len(items) == 3
    assert items.report.filtered == {"not answerable": 1, "1 evidence pages": 1, "3 evidence pages": 1}
    for item in items:
        check_common(item)
        e1, e2 = item.meta["evidence_pages"]
        (a,), (b,) = refs_of(item, "A"), refs_of(item, "B")
        assert (a.page, b.page) == (e1, e2) and e1 < e2
        assert (read_index(a.load()), read_index(b.load())) == (e1, e2)
        assert a.load().size == (320, 240)  # 160 x 120 pt at 144 dpi
        assert item.render_text() == IMAGE_TOKEN * 2 + item.question + item.prompt.post
        assert score(item, str(item.gold)) == 1.0


def test_mmlongbench_doc_variants(bench_root) -> None:
    root = bench_root("mmlongbench_doc")
    forward = {i.meta["doc_id"] + i.question: i for i in load_items("mmlongbench_doc", root=root)}
    for item in load_items("mmlongbench_doc", root=root, order="reversed", n_distractors=2):
        base = forward[item.meta["doc_id"] + item.question]
        assert item.item_id == base.item_id + "/rev+d2"
        e1, e2 = base.meta["evidence_pages"]
        assert refs_of(item, "B")[0].page == e1
        a_side = [s for s in item.spans() if s.role == "A"]
        assert sorted(s.name for s in a_side) == ["A1", "filler", "filler"]
        pages = [p.page for p in refs_of(item, "A") + refs_of(item, "filler")]
        assert sorted(pages) == sorted([e2, *item.meta["distractor_pages"]])
        assert not {e1, e2} & set(item.meta["distractor_pages"])
        again = load_items("mmlongbench_doc", root=root, order="reversed", n_distractors=2)
        assert {i.item_id: i.meta["distractor_pages"] for i in again}[item.item_id] == item.meta["distractor_pages"]


# --------------------------------------------------------------------------------------------- MuSiQue


def test_musique(bench_root) -> None:
    root = bench_root("musique")
    items = load_items("musique", root=root)
    assert len(items) == 3 and items.report.filtered == {"not 2-hop": 1, "unanswerable": 1}
    rows = {r["id"]: r for r in map(json.loads, (root / "data/musique_ans_v1.0_dev.jsonl").read_text().splitlines())}
    for item in items:
        check_common(item)
        row = rows[item.cluster_key]
        hop1, hop2 = (row["paragraphs"][h["paragraph_support_idx"]] for h in row["question_decomposition"])
        spans = item.spans()
        assert [s.role for s in spans] == ["prefix", "A", "B", "query"]
        assert spans[1].parts == (f"{hop1['title']}\n{hop1['paragraph_text']}\n\n",)
        assert spans[2].parts == (f"{hop2['title']}\n{hop2['paragraph_text']}\n\n",)
        assert spans[3].parts == (f"Question: {row['question']}\nAnswer:",)
        assert item.meta["bridge_in_b"]
        assert score(item, row["answer"]) == 1.0 and score(item, "Nowhere") == 0.0
        for alias in row["answer_aliases"]:
            assert score(item, alias) == 1.0
    swapped = load_items("musique", root=root, order="reversed", n_distractors=3)
    for item in swapped:
        assert [s.role for s in item.spans()].count("A") == 4 and item.item_id.endswith("/rev+d3")
        names = [s.name for s in item.spans() if s.role == "A"]
        assert names.count("filler") == 3 and names.count("A1") == 1
