"""Window layouts and operations, the window item and the probe registry: pure Python, no model."""

from __future__ import annotations

import pytest

from kamera.items.spans import Span
from kamera.reuse.plugin import Plugin, Registry
from kamera.window import PROBES, Layout, WindowItem, from_spans, make_probe
from kamera.window.ops import (
    add_distractors,
    drop_duplicate,
    recall_window,
    reorder,
    replace,
    slide,
    turnover_count,
)
from kamera.window.probes import UnknownProbeError
from kamera.window.probes.base import WINDOW_PROBE_REGISTRY
from kamera.window.probes.reorder import orderings


def chunk(i: int) -> Span:
    return Span("A", (f"chunk {i}",))


def item(n: int = 7, **kw) -> WindowItem:
    return WindowItem("w", tuple(chunk(i) for i in range(n)), Span("query", ("q",)), kw.pop("window", 3), **kw)


def test_slide_evicts_the_leading_chunk_and_admits_behind():
    w = Layout((0, 1), 2, (3,))
    assert slide(w, admit=4) == Layout((1,), 2, (3, 4))
    assert slide(w) == Layout((1,), 2, (3,))
    with pytest.raises(ValueError, match="leading chunk"):
        slide(Layout((), 2))
    with pytest.raises(ValueError, match="probe construction"):
        slide(Layout((0, 1), 2, masked=(0,)))


def test_recall_window_turns_the_oldest_over_first():
    old, new = (0, 1, 2, 3, 4), (6, 7, 8, 9, 10)
    assert recall_window(old, new, 0) == old
    assert recall_window(old, new, 2) == (2, 3, 4, 6, 7)
    assert recall_window(old, new, 5) == new
    assert [turnover_count(t, 5) for t in (0, 0.2, 0.4, 0.6, 0.8, 1.0)] == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="multiple of 1/k"):
        turnover_count(0.5, 5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        turnover_count(1.2, 5)
    with pytest.raises(ValueError, match="turnover n"):
        recall_window(old, new[:1], 3)


def test_drift_operations():
    w = Layout((0, 1, 2), 3)
    assert reorder(w, (2, 0, 1)).before == (2, 0, 1)
    assert replace(w, 1, 9).before == (0, 9, 2)
    assert drop_duplicate(w, 1, 0).before == (0, 0, 2)
    assert add_distractors(w, (7, 8)).before == (7, 8, 0, 1, 2)
    with pytest.raises(ValueError, match="not a permutation"):
        reorder(w, (0, 0, 1))
    with pytest.raises(ValueError, match="slot 5"):
        replace(w, 5, 9)
    with pytest.raises(ValueError, match="must differ"):
        drop_duplicate(w, 1, 1)


def test_layout_validation():
    assert Layout((0, 1), 2, (3,)).window == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="ints ≥ 0"):
        Layout((-1,), 2)
    with pytest.raises(ValueError, match="gap"):
        Layout((0,), 1, gap=-3)
    with pytest.raises(ValueError, match="masked"):
        Layout((0,), 1, masked=(1,))


def test_orderings_are_exhaustive_or_sampled_with_the_identity_first():
    assert len(orderings(3, 4, 24, 0)) == 6 and orderings(3, 4, 24, 0)[0] == (0, 1, 2)
    assert len(orderings(4, 4, 24, 0)) == 24
    six = orderings(6, 4, 24, 0)
    assert len(six) == len(set(six)) == 24 and six[0] == tuple(range(6))
    assert six == orderings(6, 4, 24, 0) and six != orderings(6, 4, 24, 1)


def test_window_item_checks_its_input():
    it = item(foreign=(chunk(9),), choices=("A", "B"), gold="A")
    assert it.chunks[-1] == chunk(9) and it.foreign_id(0) == 7 and it.answer((0, 1)) == "A"
    assert item(gold=lambda w: str(len(w))).answer((0, 1, 2)) == "3"
    with pytest.raises(ValueError, match="no chunks"):
        WindowItem("w", (), Span("query", ("q",)), 3)
    with pytest.raises(ValueError, match="window must be"):
        item(window=0)
    with pytest.raises(ValueError, match="role 'A', not 'query'"):
        WindowItem("w", (chunk(0),), chunk(1), 1)
    with pytest.raises(ValueError, match="empty chunk"):
        WindowItem("w", (Span("A", ("",)),), Span("query", ("q",)), 1)
    with pytest.raises(ValueError, match="not among choices"):
        item(choices=("A", "B"), gold="C")
    with pytest.raises(TypeError, match="not a Span"):
        WindowItem("w", ("text",), Span("query", ("q",)), 1)
    with pytest.raises(IndexError, match="foreign"):
        item().foreign_id(0)


def test_from_spans_reads_a_chunked_item():
    spans = [Span("prefix", ("p",)), Span("A", ("a",)), Span("B", ("b",)), Span("query", ("q",))]
    it = from_spans("x", spans, window=1, choices="AB", gold="B")
    assert it.prefix == spans[0] and it.history == tuple(spans[1:3]) and it.query == spans[3]
    with pytest.raises(ValueError, match="end with the query"):
        from_spans("x", spans[:-1], window=1)


def test_probe_registry_and_knob_validation():
    assert set(PROBES) == {"recall", "survivor", "reorder", "deep_half", "divergent", "excess", "refresh",
                           "revert", "disposability", "forks", "leading"}
    assert WINDOW_PROBE_REGISTRY.kind == "window probe" and isinstance(WINDOW_PROBE_REGISTRY, Registry)
    assert all(issubclass(cls, Plugin) for cls in PROBES.values())  # one plugin mechanism: kamera.reuse.plugin
    assert make_probe("recall", rank=8).rank == 8
    with pytest.raises(UnknownProbeError, match="registered window probes"):
        make_probe("recal")
    with pytest.raises(ValueError, match="no knob"):
        make_probe("recall", k=3)
    with pytest.raises(ValueError, match="rank"):
        make_probe("recall", rank=-1)
    with pytest.raises(ValueError, match="taus"):
        make_probe("recall", taus=(0.0, 1.5))
    with pytest.raises(ValueError, match="perturbations"):
        make_probe("divergent", perturbations=("shuffle",))
    with pytest.raises(ValueError, match="swaps"):
        make_probe("refresh", n_chunks=2, swaps=(3,))
    with pytest.raises(ValueError, match="n_chunks"):
        make_probe("reorder", n_chunks=1)
    with pytest.raises(ValueError, match="energy"):
        make_probe("survivor", energy=0.0)
