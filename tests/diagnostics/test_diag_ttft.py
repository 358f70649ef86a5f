"""Fig. 11(b, c): the TTFT timings' records and the cumulative-time model (no timing is asserted)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from kamera.diagnostics.records import break_even, cumulative
from kamera.diagnostics.ttft import Clock, main, segment_spans, time_item, ttft
from kamera.reuse.context import ReuseContext

TIMES = ("vision_ms", "prefill_ms", "canonical_ms", "conditioned_ms", "svd_ms", "recompute_ms", "form_ms")
PER_RANK = ("apply_ms", "reuse_ms", "speedup_prefill", "speedup_recompute")


def test_the_script_times_every_part_and_prints_the_table(capsys, tmp_path):
    out = tmp_path / "ttft.json"
    records = main(["--model", "tiny_qwen2_5_vl", "--sizes", "16", "32", "--ranks", "4", "--frame-px", "112",
                    "--repeats", "1", "--out", str(out)])
    text = capsys.readouterr().out
    assert "CPU (perf_counter)" in text and "not the paper H100 comparison" in text and "N*pre" in text
    assert "2/2 segments" in text and str(out) in text
    # the paper's Fig. 11(b) values from their one place, conf/experiment/fig11.yaml (was a second copy: 29.0)
    assert "×prefill 1.8× at 256 → 29.3× at 2048, break-even ≈ 9" in text
    saved = json.loads(out.read_text())
    assert saved["ttft"] == records and saved["cumulative"] == json.loads(json.dumps(cumulative(records)))
    assert {tuple(sorted(r)) for r in records} == {
        ("device", "dtype", "n_b", "n_frames", "n_visual", "quantity", "rank", "timer", "value")}
    assert sorted({r["n_visual"] for r in records}) == [16, 32]  # 16 visual tokens per 112-px frame
    assert sorted({r["n_frames"] for r in records}) == [1, 2]
    for n in {r["n_b"] for r in records}:
        t = {(r["quantity"], r["rank"]): r["value"] for r in records if r["n_b"] == n}
        assert set(t) == {(q, None) for q in TIMES} | {(q, 4) for q in PER_RANK}
        assert all(v > 0 for v in t.values())
        assert t[("recompute_ms", None)] == t[("vision_ms", None)] + t[("prefill_ms", None)]
        assert t[("form_ms", None)] == pytest.approx(
            sum(t[(q, None)] for q in ("canonical_ms", "conditioned_ms", "svd_ms"))
        )
        assert t[("speedup_prefill", 4)] == t[("prefill_ms", None)] / t[("reuse_ms", 4)]


def test_break_even():
    assert break_even(100.0, 1.0, 12.0) == 10  # 100 / 11 = 9.09 → 10 reuses
    assert break_even(110.0, 1.0, 12.0) == 10  # exactly 10: form + 10·reuse = 10·baseline
    assert break_even(0.0, 1.0, 2.0) == 1
    assert break_even(5.0, 3.0, 3.0) is None and break_even(5.0, 4.0, 3.0) is None
    with pytest.raises(ValueError, match="≥ 0"):
        break_even(-1.0, 1.0, 2.0)


def synthetic(n_b: int = 100) -> list[dict]:
    base = {"n_b": n_b}
    times = {"form_ms": 90.0, "prefill_ms": 10.0, "vision_ms": 5.0}
    out = [{**base, "rank": None, "quantity": q, "value": v} for q, v in times.items()]
    return [
        *out,
        {**base, "rank": 16, "quantity": "reuse_ms", "value": 1.0},
        {**base, "rank": 64, "quantity": "reuse_ms", "value": 12.0},
    ]


def test_cumulative_model():
    records = cumulative(synthetic(), n_max=4)
    cum = {(r["rank"], r["quantity"], r["n_reuse"]): r["value"] for r in records}
    assert cum[(16, "kamera_ms", 0)] == 90.0 and cum[(16, "kamera_ms", 4)] == 94.0
    assert cum[(16, "prefill_ms", 4)] == 40.0 and cum[(16, "recompute_ms", 4)] == 60.0
    assert cum[(16, "break_even_prefill", None)] == 10 and cum[(16, "break_even_recompute", None)] == 7
    assert math.isnan(cum[(64, "break_even_prefill", None)])  # reuse slower than a prefill: never pays off
    assert cum[(64, "break_even_recompute", None)] == 30
    assert len(records) == 2 * (3 * 5 + 2)


def test_cumulative_and_ttft_reject_bad_input(tiny):
    with pytest.raises(ValueError, match="no ttft records"):
        cumulative([])
    with pytest.raises(ValueError, match="lack form_ms"):
        cumulative([r for r in synthetic() if r["quantity"] != "form_ms"])
    with pytest.raises(ValueError, match="n_max"):
        cumulative(synthetic(), n_max=0)
    adapter = tiny("tiny_qwen2_5_vl")
    for kw in ({"sizes": []}, {"ranks": [0]}, {"repeats": 0}):
        with pytest.raises(ValueError):
            ttft(adapter, **kw)
    with pytest.raises(ValueError, match="text-only"):
        segment_spans(tiny("tiny_deepseek_v2"), 16)
    native = ReuseContext(adapter, segment_spans(adapter, 16, 112), canonical_context="native")
    with pytest.raises(ValueError, match="canonical_context"):
        time_item(native, [4], Clock("cpu"), 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the guard of a machine without a GPU")
def test_cuda_timing_without_a_gpu_fails_before_anything_loads():
    with pytest.raises(RuntimeError, match="no GPU"):
        main(["--device", "cuda"])
