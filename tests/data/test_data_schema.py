"""The item schema: invariants, span shape, prompt rendering and lazy media."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from kamera.data import ChunkedItem, ItemError, MediaRef, PromptTemplate, load_items
from kamera.data.fixtures import index_image, png_bytes, read_index, save_png
from kamera.data.schema import Segment, Unit, evidence_layout, group_evenly, interleaved_layout, layout

PROMPT = PromptTemplate(source="test", prefix="P\n", question="\n{question}", post="\nAnswer.")


def img(k: int) -> MediaRef:
    return MediaRef("image", f"img[{k}]", data=png_bytes(index_image(k, (16, 16))))


def item(segments: list[Segment], **kw) -> ChunkedItem:
    base = dict(
        benchmark="t",
        subset="s",
        split="x",
        item_id="t/s/x/1",
        segments=segments,
        question="Q?",
        choices=["yes", "no"],
        choice_media=None,
        gold="A",
        gold_norm="A",
        answer_format="letter",
        scorer="mc_letter",
        cluster_key="c",
        prompt=PROMPT,
    )
    return ChunkedItem(**{**base, **kw})


def test_group_evenly() -> None:
    assert group_evenly(5, None) == [range(i, i + 1) for i in range(5)]
    assert group_evenly(5, 2) == [range(0, 2), range(2, 5)]
    assert group_evenly(3, 10) == [range(0, 1), range(1, 2), range(2, 3)]
    assert group_evenly(0, 3) == []
    with pytest.raises(ValueError):
        group_evenly(4, 0)


def test_spans_shape_names_meta_and_text() -> None:
    units = [Unit(f"t{k} ", img(k)) for k in range(4)]
    it = item(
        interleaved_layout("P\n", units, 3, 4, None, " tail"), choices=None, choice_media=[img(7), img(8)]
    )
    spans = it.spans()
    assert [(s.role, s.name, s.n_images) for s in spans] == [
        ("prefix", "prefix", 0),
        ("A", "A1", 1),
        ("A", "A2", 1),
        ("A", "A3", 1),
        ("B", "B", 1),
        ("query", "query", 2),
    ]
    assert spans[1].meta == {"item_id": "t/s/x/1", "chunk": 0, "media": ("img[0]",)}
    assert spans[-1].parts[0] == " tail\nQ?\nA. "  # context after B opens the query, text merged
    assert spans[-1].meta == {"item_id": "t/s/x/1", "media": ("img[7]", "img[8]")}
    assert [read_index(p) for p in spans[-1].parts if isinstance(p, Image.Image)] == [7, 8]
    assert (
        it.render_text()
        == "P\nt0 <image>t1 <image>t2 <image>t3 <image> tail\nQ?\nA. <image>\nB. <image>\nAnswer."
    )
    assert it.render_text(with_prefix=False).startswith("t0 ")
    assert it.n_choices == 2 and it.choice_letters == "AB" and it.gold_letter == "A"


def test_question_images_and_text_choices() -> None:
    it = item(
        layout("", [([Unit("a")], False)], [Unit("b")]), question="Look <image> here", question_media=[img(3)]
    )
    assert it.render_text() == "ab\nLook <image> here\nA. yes\nB. no\nAnswer."
    with pytest.raises(ItemError, match="question has 1 <image> for 0 images"):
        replace(it, question_media=[]).render_text()


def test_filler_spans_and_without_filler() -> None:
    segs = evidence_layout("", (5, [Unit("e1")]), (9, [Unit("e2")]), [(2, [Unit("f2")]), (7, [Unit("f7")])])
    it = item(segs)
    assert [(s.name, s.parts) for s in it.spans()][:-1] == [
        ("filler", ("f2",)),
        ("A1", ("e1",)),
        ("filler", ("f7",)),
        ("B", ("e2",)),
    ]
    assert [s.name for s in it.spans(with_filler=False)] == ["A1", "B", "query"]
    rev = item(evidence_layout("", (5, [Unit("e1")]), (9, [Unit("e2")]), order="reversed"))
    assert [s.parts for s in rev.spans()][:2] == [("e2",), ("e1",)]
    with pytest.raises(ValueError, match="order must be one of"):
        evidence_layout("", (1, []), (2, []), order="sideways")


@pytest.mark.parametrize(
    ("segments", "kw", "message"),
    [
        ([Segment("A", 0, "a"), Segment("B", 1, "")], {}, "no B chunk"),
        ([Segment("A", 0, "a")], {}, "no B chunk"),
        ([Segment("A", 0, " "), Segment("B", 1, "b")], {}, "no A chunk"),
        ([Segment("B", 1, "b"), Segment("A", 0, "a")], {}, "out of order"),
        ([Segment("A", 0, "a"), Segment("B", 1, "b"), Segment("B", 2, "c")], {}, "single chunk"),
        ([Segment("A", 0, "a", img(1)), Segment("B", 1, "b", img(1))], {}, "more than once"),
        ([Segment("A", 0, "a"), Segment("B", 1, "b")], {"gold_norm": "C"}, "not among options"),
    ],
)
def test_invariants(segments: list[Segment], kw: dict, message: str) -> None:
    with pytest.raises(ItemError, match=message):
        item(segments, **kw).validate()


def test_media_once_against_source_row() -> None:
    it = item([Segment("A", 0, "", img(1)), Segment("B", 1, "", img(2))])
    it.validate(["img[1]", "img[2]"])
    with pytest.raises(ItemError, match=r"missing \['img\[3\]'\]"):
        it.validate(["img[1]", "img[2]", "img[3]"])


def test_media_is_lazy(tmp_path: Path, fresh) -> None:
    ref = MediaRef("image", "x", path=tmp_path / "later.png")
    save_png(
        index_image(9, (16, 16)), tmp_path / "later.png"
    )  # created after the reference: nothing read yet
    assert read_index(ref.load()) == 9 and ref.load().mode == "RGB"
    root = fresh("mm_niah")
    for p in (root / "mm_niah_val/images/obelics").iterdir():
        p.unlink()
    items = load_items("mm_niah", root=root, verify_media=False)  # selecting decodes nothing
    assert len(items) == 6 and items[0].media_refs()[0].path.name.endswith(".png")
