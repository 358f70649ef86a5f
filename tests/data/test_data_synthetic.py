"""The in-memory ``synthetic`` benchmark: deterministic, cheap, and answerable only from A and B."""

from __future__ import annotations

import numpy as np
import pytest

from kamera.data import load_items, score
from kamera.data.synthetic import CELLS, COLOURS


def test_deterministic_by_seed() -> None:
    a, b = load_items("synthetic", n_items=4, seed=7), load_items("synthetic", n_items=4, seed=7)
    for x, y in zip(a, b, strict=True):
        assert x.render_text() == y.render_text() and x.gold == y.gold
        assert [r.data for r in x.media_refs()] == [r.data for r in y.media_refs()]
    other = load_items("synthetic", n_items=4, seed=8)
    assert [x.render_text() for x in a] != [x.render_text() for x in other]


@pytest.mark.parametrize(("n_a", "size", "n_choices"), [(1, 56, 2), (2, 56, 4), (3, 112, 6)])
def test_knobs_shape_and_cost(n_a: int, size: int, n_choices: int) -> None:
    for item in load_items("synthetic", n_items=5, n_a_chunks=n_a, image_size=size, n_choices=n_choices):
        spans = item.spans()
        assert [s.role for s in spans] == ["prefix", *["A"] * n_a, "B", "query"]
        assert all(p.size == (size, size) for s in spans for p in s.parts if not isinstance(p, str))
        assert item.n_choices == n_choices and len(set(item.choices)) == n_choices
        assert len(item.render_text(image_token="")) <= 230
        assert score(item, item.gold_letter) == 1.0


def test_answer_needs_a_and_b() -> None:
    for item in load_items("synthetic", n_items=20, seed=2):
        bindings, board = item.meta["bindings"], item.meta["board"]
        shape = board[CELLS.index(item.meta["cell"])]
        assert item.choices[item.choice_letters.index(item.gold_letter)] == bindings[shape]
        keyed_others = {c for s, c in bindings.items() if s != shape}
        assert keyed_others & set(item.choices)  # distractors come from the keys, so B alone is not enough
        board_img = np.asarray(item.spans()[-2].parts[-1]).astype(int)
        assert np.abs(board_img[..., 0] - board_img[..., 2]).max() < 30  # the board carries no colour
        assert len(bindings) >= 2  # several shapes keyed, so A alone is not enough either
        assert set(bindings.values()) <= set(COLOURS)


def test_invalid_knobs() -> None:
    with pytest.raises(ValueError, match="n_a_chunks"):
        load_items("synthetic", n_a_chunks=4)
    with pytest.raises(ValueError, match="n_choices"):
        load_items("synthetic", n_choices=7)
    with pytest.raises(ValueError, match="image_size"):
        load_items("synthetic", image_size=14)
