"""Bad data: missing root or file → a specific error; a corrupt image, a short video, an item with no B,
a missing document, a malformed row → a logged skip with its reason (never a crash, never silent)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from kamera.data import BenchmarkDataMissing, ItemError, MediaError, load_items


def rewrite_jsonl(path: Path, edit) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(edit(i, r)) + "\n" for i, r in enumerate(rows)))


def reasons(items) -> dict[str, str]:
    return {s.item_id: s.reason for s in items.report.skipped}


# --------------------------------------------------------------------------------- missing data: errors


def test_missing_root_names_path_files_and_source(tmp_path: Path) -> None:
    with pytest.raises(BenchmarkDataMissing) as err:
        load_items("musique", root=tmp_path / "nowhere")
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    assert str(tmp_path / "nowhere") in msg and "musique_ans_v1.0_dev.jsonl" in msg
    assert "github.com/StonyBrookNLP/musique" in msg


def test_kamera_data_unset_or_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh) -> None:
    monkeypatch.delenv("KAMERA_DATA", raising=False)
    with pytest.raises(BenchmarkDataMissing, match="KAMERA_DATA is not set"):
        load_items("mm_niah")
    monkeypatch.setenv("KAMERA_DATA", str(tmp_path / "data"))
    with pytest.raises(
        BenchmarkDataMissing, match=r"MM-NIAH[\s\S]*huggingface.co/datasets/OpenGVLab/MM-NIAH"
    ):
        load_items("mm_niah")
    fresh("musique")  # writes tmp_path/data/MuSiQue: now found through KAMERA_DATA
    assert len(load_items("musique")) == 3


@pytest.mark.parametrize(
    ("bench", "remove", "named"),
    [
        ("musique", "data/musique_ans_v1.0_dev.jsonl", "musique_ans_v1.0_dev.jsonl"),
        ("mm_niah", "mm_niah_val/annotations/reasoning-image.jsonl", "reasoning-image.jsonl"),
        ("mm_niah", "mm_niah_val/images", "mm_niah_val/images"),
        ("milebench", "StateChange/StateChange.json", "StateChange/StateChange.json"),
        ("muirbench", "data", "data/test-*.parquet"),
        ("videomme", "videomme", "videomme/test-*.parquet"),
        ("egoschema", "Subset", "questions.json"),
        ("mmlongbench_doc", "data/samples.json", "samples.json"),
        ("mmlongbench_doc", "data/documents", "documents"),
    ],
)
def test_missing_file_is_a_specific_error(bench: str, remove: str, named: str, fresh) -> None:
    root = fresh(bench)
    target = root / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(BenchmarkDataMissing) as err:
        load_items(bench, root=root)
    assert named in str(err.value) and "published at" in str(err.value)


# ---------------------------------------------------------------------------------- bad rows: skips


def test_corrupt_and_missing_images_are_skipped(fresh, caplog: pytest.LogCaptureFixture) -> None:
    root = fresh("mm_niah")
    rows = [
        json.loads(x)
        for x in (root / "mm_niah_val/annotations/retrieval-image.jsonl").read_text().splitlines()
    ]
    images = root / "mm_niah_val/images"
    (images / rows[0]["images_list"][0]).write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    (images / rows[1]["meta"]["choices_image_path"][2]).unlink()
    with caplog.at_level(logging.WARNING, logger="kamera.data"):
        items = load_items("mm_niah", root=root, subset="retrieval-image")
    assert len(items) == 1
    why = reasons(items)
    assert "cannot decode image" in why["mm_niah/retrieval-image/val/0"]
    assert rows[0]["images_list"][0] in why["mm_niah/retrieval-image/val/0"]
    assert "image file missing" in why["mm_niah/retrieval-image/val/1"]
    assert "skipped mm_niah/retrieval-image/val/0" in caplog.text
    with pytest.raises(MediaError):
        load_items("mm_niah", root=root, subset="retrieval-image", strict=True)


def test_media_breaking_after_load_raises_media_error(fresh) -> None:
    root = fresh("milebench")
    (item,) = load_items("milebench", root=root, subset="ObjectShuffle", n_items=1, verify_media=False)
    victim = item.media_refs()[-1].path
    victim.unlink()
    with pytest.raises(MediaError, match=str(victim)):
        item.spans()


def test_video_with_fewer_frames_than_asked(bench_root) -> None:
    items = load_items("videomme", root=bench_root("videomme"), n_frames=44)
    assert len(items) + len(items.report.skipped) == 9
    assert items.report.skipped and all(
        "fewer than the 44 asked for" in s.reason for s in items.report.skipped
    )
    assert all(item.meta["video_frames"] >= 44 for item in items)


def test_corrupt_or_missing_video_is_skipped(fresh) -> None:
    root = fresh("egoschema")
    videos = sorted((root / "videos").glob("*.mp4"))
    videos[0].write_bytes(b"garbage")
    videos[1].unlink()
    items = load_items("egoschema", root=root, n_frames=4)
    assert len(items) == 1
    why = " | ".join(reasons(items).values())
    assert "cannot open video" in why and "video missing" in why


def test_items_without_b_are_skipped_with_reason(fresh) -> None:
    root = fresh("musique")
    rewrite_jsonl(
        root / "data/musique_ans_v1.0_dev.jsonl",
        lambda i, r: (
            {
                **r,
                "question_decomposition": [
                    r["question_decomposition"][0],
                    {**r["question_decomposition"][1], "paragraph_support_idx": None},
                ],
            }
            if i == 0
            else r
        ),
    )
    items = load_items("musique", root=root)
    assert len(items) == 2 and "no B chunk" in next(iter(reasons(items).values()))

    root = fresh("milebench")
    path = root / "ActionSequence/ActionSequence.json"
    doc = json.loads(path.read_text())
    inst = doc["data"][0]["task_instance"]
    inst["images_path"], inst["context"] = inst["images_path"][:1], "Frame 1: {image#1}\nWhat next?"
    path.write_text(json.dumps(doc))
    items = load_items("milebench", root=root, subset="ActionSequence")
    assert len(items) == 2 and "no B chunk" in reasons(items)["milebench/ActionSequence/test/0"]

    root = fresh("mm_niah")
    rewrite_jsonl(
        root / "mm_niah_val/annotations/retrieval-image.jsonl",
        lambda i, r: {**r, "meta": {**r["meta"], "placed_depth": None}} if i == 2 else r,
    )
    items = load_items("mm_niah", root=root, subset="retrieval-image")
    assert "no B chunk" in reasons(items)["mm_niah/retrieval-image/val/2"]


def test_document_problems_are_skipped(fresh) -> None:
    root = fresh("mmlongbench_doc")
    samples = json.loads((root / "data/samples.json").read_text())
    samples[0]["evidence_pages"] = "[2, 40]"  # beyond the 7-page PDF
    samples[1]["doc_id"] = "absent.pdf"
    (root / "data/samples.json").write_text(json.dumps(samples, indent=4))
    items = load_items("mmlongbench_doc", root=root)
    why = sorted(reasons(items).values())
    assert len(items) == 1 and len(why) == 2
    assert any("no B chunk" in w and "outside the PDF's 7 pages" in w for w in why)
    assert any("document missing" in w and "absent.pdf" in w for w in why)
    (root / "data/documents" / samples[2]["doc_id"]).write_bytes(b"%PDF-1.4 broken")
    broken = load_items("mmlongbench_doc", root=root)
    assert len(broken) == 0 and any("cannot open PDF" in w for w in reasons(broken).values())


def test_placeholder_mismatch_and_malformed_rows(fresh) -> None:
    root = fresh("mm_niah")
    ann = root / "mm_niah_val/annotations/reasoning-image.jsonl"
    rewrite_jsonl(ann, lambda i, r: {**r, "context": r["context"] + "<image>"} if i == 1 else r)
    with ann.open("a") as fh:
        fh.write("{not json\n")
    items = load_items("mm_niah", root=root, subset="reasoning-image")
    assert len(items) == 2
    why = reasons(items)
    assert "placeholders" in why["mm_niah/reasoning-image/val/1"]
    assert "invalid JSON" in why["reasoning-image.jsonl:line4"]
    assert {s.stage for s in items.report.skipped} == {"build", "row"}
    with pytest.raises(ItemError, match="placeholders"):
        load_items("mm_niah", root=root, subset="reasoning-image", strict=True)


def test_unlabelled_and_too_long_rows_are_filtered_not_skipped(fresh) -> None:
    root = fresh("mm_niah")
    rewrite_jsonl(
        root / "mm_niah_val/annotations/counting-image.jsonl",
        lambda i, r: {**r, "answer": None} if i == 0 else r,
    )
    items = load_items("mm_niah", root=root, subset="counting-image", max_context_length=650)
    assert len(items) == 1 and items.report.skipped == []  # context_length is 500 + 100 * id
    assert items.report.filtered == {
        "no gold answer (test labels are not released)": 1,
        "meta.context_length > 650": 1,
    }
