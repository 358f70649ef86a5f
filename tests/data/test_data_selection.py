"""Registry, root resolution, seeded stable selection, the length filter and the load report."""

from __future__ import annotations

import os

import pytest

from kamera.data import BENCHMARKS, LoadedItems, load_items, make_fixture
from kamera.data.selection import selection_order


def ids(items) -> list[str]:
    return [i.item_id for i in items]


def test_registry_names_and_unknown_bench() -> None:
    assert set(BENCHMARKS) == {
        "mm_niah",
        "milebench",
        "muirbench",
        "videomme",
        "egoschema",
        "mmlongbench_doc",
        "musique",
        "synthetic",
        "synthetic_audio",
        "binding_words",
    }
    with pytest.raises(ValueError, match=r"unknown benchmark 'mmniah'.*'mm_niah'"):
        load_items("mmniah")
    with pytest.raises(ValueError, match="synthetic is generated in memory"):
        make_fixture("synthetic", "/tmp")


def test_unknown_subset_split_and_bad_kwargs(bench_root) -> None:
    with pytest.raises(ValueError, match=r"unknown subset.*'retrieval-image'"):
        load_items("mm_niah", root=bench_root("mm_niah"), subset="retrieval")
    with pytest.raises(ValueError, match=r"unknown split 'val'.*\['dev', 'train'\]"):
        load_items("musique", root=bench_root("musique"), split="val")
    with pytest.raises(TypeError, match="n_franes"):
        load_items("videomme", root=bench_root("videomme"), n_franes=8)
    with pytest.raises(ValueError, match="max_tokens needs a length_fn"):
        load_items("synthetic", max_tokens=10)


def test_selection_is_seeded_stable_and_sorted() -> None:
    a = load_items("synthetic", n_items=6, seed=3)
    assert isinstance(a, LoadedItems) and ids(a) == sorted(ids(a))
    assert ids(a) == ids(load_items("synthetic", n_items=6, seed=3))
    assert [i.render_text() for i in a] == [
        i.render_text() for i in load_items("synthetic", n_items=6, seed=3)
    ]
    assert ids(a) != ids(load_items("synthetic", n_items=6, seed=4))
    assert set(ids(load_items("synthetic", n_items=3, seed=3))) <= set(ids(a))  # a prefix of the same order
    assert a.report.n_rows == 64 and a.report.n_selected == 6


def test_selection_order_ignores_input_order() -> None:
    names = [f"x/{k}" for k in range(50)]
    assert selection_order(names, 1) == selection_order(list(reversed(names)), 1)
    assert selection_order(names, 1) != selection_order(names, 2)


def test_all_items_without_n_items_and_fixture_rerun(bench_root) -> None:
    root = bench_root("mm_niah")
    first = load_items("mm_niah", root=root, seed=0)
    assert ids(first) == ids(load_items("mm_niah", root=root, seed=99))  # no sampling when n_items is None
    two = load_items("mm_niah", root=root, n_items=2, seed=5)
    assert len(two) == 2 and set(ids(two)) <= set(ids(first))


def test_length_filter_drops_and_reports() -> None:
    flags: set[tuple] = set()

    def length(item) -> int:
        flags.add((os.environ.get("HF_HUB_OFFLINE"), os.environ.get("HF_DATASETS_OFFLINE")))
        return len(item.render_text()) + 10 * len(item.media_refs())

    everything = load_items("synthetic", n_items=20, seed=1)
    cut = sorted(length(i) for i in everything)[10]
    before = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    flags.clear()
    kept = load_items("synthetic", n_items=8, seed=1, max_tokens=cut, length_fn=length)
    assert flags == {("1", "1")}  # offline while loading
    assert {k: os.environ.get(k) for k in before} == before  # offline flags restored
    assert len(kept) == 8 and all(length(i) <= cut for i in kept)
    dropped = kept.report.skipped_for("length")
    assert dropped and all(f"exceeds max_tokens {cut}" in s.reason for s in dropped)
    assert "length" in kept.report.summary()


def test_n_items_beyond_supply_returns_what_exists(bench_root) -> None:
    items = load_items("musique", root=bench_root("musique"), n_items=50)
    assert len(items) == 3 and items.report.n_rows == 3
