"""The MuSiQue and MMLongBench-Doc loaders on real annotation rows (``real_samples/``, copied byte for
byte from ``shared/benchmark-samples``), with placeholder PDFs generated at the paths the rows name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kamera.data import load_items, score, score_detail
from kamera.data.fixtures import read_index, write_pdf

REAL_SAMPLES = Path(__file__).parent / "real_samples"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "benchmark-samples"
FILES = ["MuSiQue/data/musique_ans_v1.0_dev.jsonl", "MMLongBench-Doc/data/samples.json"]


@pytest.mark.parametrize("rel", FILES)
def test_committed_copy_matches_shared_samples(rel: str) -> None:
    if not (SHARED / rel).exists():
        pytest.skip(f"shared samples not present at {SHARED}")
    assert (REAL_SAMPLES / rel).read_bytes() == (SHARED / rel).read_bytes()


def test_musique_real_rows() -> None:
    items = load_items("musique", root=REAL_SAMPLES / "MuSiQue")
    assert [i.cluster_key for i in items] == [
        "2hop__13548_13529",
        "2hop__170823_120171",
        "2hop__766973_770570",
    ]
    assert items.report.skipped == [] and not items.report.filtered
    rows = {r["id"]: r for r in map(json.loads, (REAL_SAMPLES / FILES[0]).read_text().splitlines())}
    # paragraph idx of hop 1 (A) and hop 2 (B), in decomposition order (not sorted)
    support = {"2hop__13548_13529": [1, 2], "2hop__766973_770570": [19, 4], "2hop__170823_120171": [7, 2]}
    for item in items:
        row = rows[item.cluster_key]
        assert item.meta["support_idx"] == support[item.cluster_key]
        a, b = (s.parts[0] for s in item.spans() if s.role in ("A", "B"))
        pa, pb = (row["paragraphs"][i] for i in support[item.cluster_key])
        assert (
            a == f"{pa['title']}\n{pa['paragraph_text']}\n\n"
            and b == f"{pb['title']}\n{pb['paragraph_text']}\n\n"
        )
        assert "\\u" not in a + b  # escapes decoded
        assert item.meta["bridge_in_b"]  # the first hop's answer is named in the B paragraph
        assert item.meta["answer_aliases"] == row["answer_aliases"]
        assert score(item, row["answer"]) == 1.0 and score(item, "Paris") == 0.0
    barca = next(i for i in items if i.cluster_key == "2hop__13548_13529")
    assert barca.spans()[1].parts[0].startswith("FC Barcelona\n")  # a repeated title, picked by idx
    rockland = next(i for i in items if i.cluster_key == "2hop__766973_770570")
    assert score(rockland, "Rockland County, New York") == 1.0
    assert score_detail(rockland, "Rockland")["f1"] == pytest.approx(2 / 3)


@pytest.fixture
def mmlb_root(tmp_path: Path) -> Path:
    """The real samples.json plus placeholder PDFs (25 pages) at data/documents/<doc_id>."""
    root = tmp_path / "MMLongBench-Doc"
    (root / "data").mkdir(parents=True)
    shutil.copyfile(REAL_SAMPLES / FILES[1], root / FILES[1].split("/", 1)[1])
    for doc_id in {r["doc_id"] for r in json.loads((root / "data/samples.json").read_text())}:
        write_pdf(root / "data" / "documents" / doc_id, 25, size_pt=(96, 72))
    return root


def test_mmlongbench_doc_real_rows(mmlb_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAMERA_CACHE", str(mmlb_root.parent / "cache"))
    items = load_items("mmlongbench_doc", root=mmlb_root)
    by_pages = {tuple(i.meta["evidence_pages"]): i for i in items}
    assert sorted(by_pages) == [(3, 5), (3, 22), (8, 12), (19, 20)]  # the four two-page rows
    assert items.report.filtered == {"1 evidence pages": 2, "3 evidence pages": 1, "not answerable": 1}
    for pages, item in by_pages.items():
        a, b = (s for s in item.spans() if s.role in ("A", "B"))
        assert (read_index(a.parts[0]), read_index(b.parts[0])) == pages
        assert item.cluster_key == item.meta["doc_id"] and score(item, str(item.gold)) == 1.0
    float_item = by_pages[(3, 5)]
    assert float_item.answer_format == "float" and float_item.gold_norm == 18.29
    assert score(float_item, "18.3%") == 1.0 and score(float_item, "20%") == 0.0
    assert by_pages[(3, 22)].meta["evidence_sources"] == ["Pure-text (Plain-text)", "Table"]
    int_item = by_pages[(8, 12)]
    assert '"no lean"' in int_item.question and int_item.gold_norm == float(int_item.gold)
    assert by_pages[(19, 20)].gold_norm == "latinos interviewed by cellphone"
