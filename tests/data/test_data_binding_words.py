"""``binding_words``: the binding task in plain words: deterministic, and each kind answerable only from the
chunks it names."""

from __future__ import annotations

import pytest

from kamera.data import load_items, score


def _facts(text: str) -> list[str]:
    return [s.strip() for s in text.split(".") if s.strip()]


def test_deterministic_and_kinds() -> None:
    a = load_items("binding_words", n_items=3, seed=5)
    b = load_items("binding_words", n_items=3, seed=5)
    assert [x.render_text() for x in a] == [x.render_text() for x in b]
    assert [x.render_text() for x in a] != [x.render_text() for x in load_items("binding_words", n_items=3, seed=6)]
    assert {x.subset for x in a} <= {"control", "control_b", "two_hop"}
    for item in a:
        assert [s.role for s in item.spans()] == ["prefix", "A", "B", "query"]
        assert all(isinstance(p, str) for s in item.spans() for p in s.parts)  # text only: any tokenizer
        assert score(item, item.gold_letter) == 1.0


@pytest.mark.parametrize("kind", ["two_hop", "control", "control_b"])
def test_answer_needs_the_named_chunks(kind: str) -> None:
    for item in load_items("binding_words", subset=kind, n_items=10, seed=1):
        spans = {s.role: " ".join(p for p in s.parts) for s in item.spans()}
        m, gold = item.meta, item.choices[item.choice_letters.index(item.gold_letter)]
        a_facts, b_facts = _facts(spans["A"].split(":", 1)[1]), _facts(spans["B"].split(":", 1)[1])
        assert f"The {m['target']} is {m['colour'][m['target']]}" in a_facts
        assert f"The {m['target']} is in the {m['place'][m['target']]}" in b_facts
        if kind == "control_b":
            assert gold == m["target"] and m["place"][m["target"]] in item.question
            assert [o for o in item.choices if o in m["colour"]] == list(item.choices)  # distractors are in the world
        else:
            assert gold == m["colour"][m["target"]]
            assert set(item.choices) <= set(m["colour"].values())  # every option is some object's colour in A
        if kind == "two_hop":
            assert m["target"] not in item.question.rstrip("?").split()  # the object is named only through B
            assert m["place"][m["target"]] in item.question
        if kind == "control":
            assert m["target"] in item.question.rstrip("?").split()


def test_invalid_knobs() -> None:
    with pytest.raises(ValueError, match="n_entries"):
        load_items("binding_words", n_entries=1)
    with pytest.raises(ValueError, match="n_choices"):
        load_items("binding_words", n_entries=3, n_choices=4)
    with pytest.raises(ValueError, match="unknown subset"):
        load_items("binding_words", subset="three_hop")
