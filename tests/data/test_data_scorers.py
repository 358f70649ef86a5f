"""Scorers on right and wrong predictions, including the edge cases each reference evaluation has."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kamera.data import ChunkedItem, extract_choice_letter, gold_letter, score, score_detail
from kamera.data.schema import PromptTemplate, Segment
from kamera.data.scorers import anls, float_match, milebench_letter, mmlb_normalise, mmlongbench_score


def make_item(scorer: str, gold, gold_norm, answer_format: str, choices=None, meta=None) -> ChunkedItem:
    """A minimal valid item carrying just what the scorers read."""
    return ChunkedItem(
        benchmark="t",
        subset="s",
        split="x",
        item_id="t/s/x/0",
        segments=[Segment("A", 0, "a"), Segment("B", 1, "b")],
        question="q?",
        choices=choices,
        choice_media=None,
        gold=gold,
        gold_norm=gold_norm,
        answer_format=answer_format,
        scorer=scorer,
        cluster_key="c",
        prompt=PromptTemplate(source="test"),
        meta=meta or {},
    )


OPTS = ["a red ball", "a blue cube", "the green cone", "a yellow star"]


@pytest.mark.parametrize(
    ("pred", "letter"),
    [
        ("B", "B"),
        ("b", "B"),
        ("(C)", "C"),
        ("D.", "D"),
        ("**A**", "A"),
        ("B. a blue cube", "B"),
        ("The best answer is C.", "C"),
        ("Answer: (D)", "D"),
        ("I think the answer is B because the cube is blue.", "B"),
        ("A man walks left, so the correct option is C", "C"),  # article "A" is not option A
        ("A person opens the door, then C happens.", "C"),
        ("Option A is wrong; the answer is D.", "D"),
        ("the green cone", "C"),  # option text only
        ("It is E", None),  # not an option letter (4 options)
        ("I cannot tell.", None),
        ("A or B", None),  # ambiguous
        ("A is correct.", "A"),
        ("", None),
    ],
)
def test_extract_choice_letter(pred: str, letter: str | None) -> None:
    assert extract_choice_letter(pred, 4, OPTS) == letter


def test_mc_letter_scorer_and_gold_letter() -> None:
    item = make_item("mc_letter", "C", "C", "letter", choices=OPTS)
    assert gold_letter(item) == "C" and item.choice_letters == "ABCD"
    assert score(item, "The answer is C.") == 1.0
    assert score(item, "A dog is there, but C is right") == 1.0
    assert score(item, "B") == 0.0
    assert score(item, "no idea") == 0.0


def test_mmniah_mc_follows_reference_parse() -> None:
    item = make_item("mmniah_mc", 1, "B", "letter", choices=["x", "y", "z", "w"])
    for right in (
        "B",
        "b.",
        "The answer is B",
        "**B**",
        "B. y",
        "1",
    ):  # a digit string is compared to the index
        assert score(item, right) == 1.0, right
    for wrong in ("A", "C.", "Answer: B", "none", "I think B"):  # the reference parse is strict
        assert score(item, wrong) == 0.0, wrong
    camera = make_item("mmniah_mc", 0, "A", "letter", choices=["left", "right"])
    assert score(camera, "The camera is moving left.") == 1.0


def test_mmniah_counting_soft_accuracy() -> None:
    item = make_item("mmniah_count", [1, 0, 2, 1], [1, 0, 2, 1], "list")
    assert score(item, "[1, 0, 2, 1]") == 1.0
    assert score(item, "```json\n[1, 0, 0, 1]\n```") == 0.75
    assert score(item, '{"image 1": [1, 0], "image 2": [2, 0]}') == 0.75
    assert score(item, "[1, 0]") == 0.5
    assert score(item, "one, zero") == 0.0
    assert score(item, '{"a": 1}') == 0.0


def test_milebench_match_choice() -> None:
    options = ["The person opened the door.", "The person sat down.", "The person took the cup."]
    assert milebench_letter("B. The person sat down.", options) == "B"
    assert milebench_letter("Answer: the person took the cup", options) == "C"  # option text, spaces ignored
    assert milebench_letter("a", options) == "A"
    assert milebench_letter("", options) == ""  # deliberate deviation: the reference maps "" to "C"
    item = make_item("milebench_choice", options[1], "B", "letter", choices=options)
    assert score(item, "B The person sat down") == 1.0
    assert score(item, "The person opened the door.") == 0.0
    assert score(item, "the answer is b") == 0.0  # reference: letters of the sentence concatenated, not "B"


@pytest.mark.parametrize(
    ("gold", "fmt", "pred", "expected"),
    [
        ("8", "Int", "8", 1.0),
        ("8", "Int", "There are 8 references.", 1.0),
        ("8", "Int", "9", 0.0),
        ("18.29%", "Float", "18.29", 1.0),
        ("18.29%", "Float", "18.3%", 1.0),  # within 1% relative
        ("18.29%", "Float", "0.1829", 1.0),  # fraction of the percentage
        ("18.29%", "Float", "18.8", 0.0),
        ("18.29%", "Float", "not a number", 0.0),
        ("Latinos interviewed by cellphone", "Str", "latinos interviewed by cell phone", None),  # ANLS > .5
        ("Latinos interviewed by cellphone", "Str", "Foreign born Latinos", 0.0),
        ("2019-05-12", "Str", "2019-05-12", 1.0),  # dates: exact match
        ("2019-05-12", "Str", "2019-05-13", 0.0),
        ("['White', '10%']", "List", "['10%', 'white']", 1.0),  # order-free, cleaned
        ("['White', '10%']", "List", "['White']", 0.0),  # wrong length
        ("['Apple', 'Banana']", "List", "['apple', 'bananas']", None),  # ANLS per element
        ("Not answerable", "None", "Not answerable", 1.0),
        ("Not answerable", "None", "'not answerable'", 1.0),
        ("Not answerable", "None", "42", 0.0),
    ],
)
def test_mmlongbench_rule(gold: str, fmt: str, pred: str, expected: float | None) -> None:
    item = make_item("mmlongbench_rule", gold, mmlb_normalise(gold, fmt), fmt.lower())
    got = score(item, pred)
    if expected is None:
        assert 0.5 < got < 1.0
    else:
        assert got == expected
    assert got == mmlongbench_score(gold, pred, fmt)


def test_mmlongbench_helpers() -> None:
    assert mmlb_normalise("['White', '10%']", "List") == ["10", "white"]
    assert mmlb_normalise("18.29%", "Float") == 18.29
    assert mmlb_normalise("Not answerable", "None") == "not answerable"
    assert float_match(0.5, 50.0) and not float_match(0.5, 0.6)
    assert anls("abc", "abc") == 1.0 and anls("abc", "xyz") == 0.0
    item = make_item("mmlongbench_rule", "5", 5.0, "int")
    assert score_detail(item, "Not answerable")["pred_answerable"] == 0.0


def test_musique_em_f1_with_aliases() -> None:
    item = make_item(
        "musique_em_f1",
        "Rockland County",
        ["rockland county"],
        "str",
        meta={"answer_aliases": ["Rockland County, New York"]},
    )
    assert score_detail(item, "rockland county") == {"score": 1.0, "em": 1.0, "f1": 1.0}
    assert score(item, "Rockland County, New York.") == 1.0  # alias, punctuation ignored
    detail = score_detail(item, "the county of Rockland")
    assert detail["em"] == 0.0 and 0.0 < detail["f1"] < 1.0
    assert score_detail(item, "Albany")["f1"] == 0.0


def test_unknown_scorer_is_a_clear_error() -> None:
    item = replace(make_item("mc_letter", "A", "A", "letter", choices=OPTS), scorer="nope")
    with pytest.raises(ValueError, match="unknown scorer 'nope'"):
        score(item, "A")
