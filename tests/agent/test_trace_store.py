"""Agent traces (seeded generators, the JSONL reader's one-line errors) and the content-addressed store's budget."""

from __future__ import annotations

from itertools import pairwise

import pytest

from kamera.agent.store import Store, orbit_key, patch_key
from kamera.agent.trace import doc, make_trace, read_jsonl, video, web


def test_generators_are_seeded_and_shaped():
    assert web(11, 4, 9, 0.3, seed=2) == web(11, 4, 9, 0.3, seed=2) != web(11, 4, 9, 0.3, seed=3)
    w = web(11, 4, 9, 0.0).steps
    assert w[0] == (0, 1, 2, 3) and all(b == (*a[1:], b[-1]) for a, b in pairwise(w))  # slide by one
    v = video(11, 4, 12, 0.5, 0.3, seed=1).steps
    assert {frozenset(s) for s in v} == {frozenset(range(4))} and len(set(v)) > 1  # one set, several orders
    d = doc(11, 4, 10, 0.3).steps
    assert d[0] == (0, 3, 7, 10) and any(
        s == tuple(range(s[0], s[0] + 4)) for s in d[1:]
    )  # coarse, then runs
    assert all(len(s) == 4 for t in (w, v, d) for s in t)


@pytest.mark.parametrize(
    ("knobs", "why"),
    [
        ({"window": 0}, "trace.window=0: must be an integer in 1..11"),
        ({"steps": 0}, "trace.steps=0: must be an integer >= 1"),
        ({"lookback": 1.5}, "trace.lookback=1.5: a rate in [0, 1]"),
        ({"reorder": 0.2}, "unexpected keyword argument 'reorder'"),
    ],
)
def test_bad_knobs_are_one_line(knobs, why):
    with pytest.raises(ValueError, match=None) as err:
        make_trace("web", 11, knobs)
    assert why in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", 'a step is an object with a "window" list'),
        ('{"window": [0, 1], "query": "x"}', "unknown key(s) ['query']"),
        ('{"window": []}', '"window" must be a non-empty list of integer chunk ids'),
        ('{"window": [0, "a"]}', '"window" must be a non-empty list of integer chunk ids'),
        ('{"window": [0, 11]}', "chunk id(s) [11] out of range: the pool holds chunks 0..10"),
        ('{"window": [0, 1, 0]}', "chunk id(s) [0] appear twice in one window"),
    ],
)
def test_jsonl_errors_name_line_and_cause(tmp_path, line, why):
    p = tmp_path / "trace.jsonl"
    p.write_text('{"window": [0, 1, 2]}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        read_jsonl(p, 11)
    msg = str(err.value)
    assert msg.startswith(f"{p}:3: ") and why in msg and "\n" not in msg


def test_jsonl_reads_a_trace(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"window": [0, 1]}\n{"step": 1, "window": [1, 2], "note": "slide"}\n', encoding="utf-8")
    assert make_trace("web", 11, {}, path=str(p)).steps == ((0, 1), (1, 2))
    (tmp_path / "e.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="the trace has no steps"):
        read_jsonl(tmp_path / "e.jsonl", 11)
    with pytest.raises(ValueError, match="no such file"):
        read_jsonl(tmp_path / "missing.jsonl", 11)


def test_keys_separate_order_and_set():
    assert patch_key("c", ["a", "b"]) != patch_key("c", ["b", "a"])
    assert orbit_key("c", ["a", "b"]) == orbit_key("c", ["b", "a"]) != orbit_key("c", ["a", "d"])


@pytest.mark.parametrize("eviction", ["lru", "cost"])
def test_store_budget_and_eviction(eviction):
    s = Store(capacity=100, eviction=eviction)
    s.begin_step()
    s.put("a", 1, 40, tokens=40)  # 1 token a byte
    s.put("b", 2, 40, tokens=4)  # cheap to rebuild
    s.begin_step()
    assert s.get("a") == 1  # a is used this step
    s.put("c", 3, 40, tokens=40)
    assert s.held <= 100 and s.evictions == 1 and "b" not in s and "a" in s and "c" in s
    assert s.bytes_read == 40 and s.bytes_written == 120
    assert not s.put("huge", 0, 101, tokens=1) and "huge" not in s
    # lru drops the least recently used, cost the fewest rebuild tokens per byte:
    s3 = Store(capacity=80, eviction=eviction)
    s3.begin_step()
    s3.put("dear", 0, 40, tokens=100)
    s3.put("cheap", 0, 40, tokens=1)
    s3.begin_step()
    s3.put("new", 0, 40, tokens=10)
    assert ("cheap" in s3) == (eviction == "lru") and ("dear" in s3) == (eviction == "cost")
    with pytest.raises(ValueError, match="eviction='fifo': one of"):
        Store(eviction="fifo")
