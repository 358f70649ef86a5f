"""Fig. 12(b): relocated keys against keys prefilled at the new position, per RoPE scheme and dtype.

The float32 bounds are those tests/test_operator.py proves for relocation (the model's own float32
angle rounding at large positions is what remains); the bf16 floor is the error of storing a float32
key in bf16 (unit roundoff 2⁻⁹, so a relative Frobenius error of order 1e-3).
"""

from __future__ import annotations

import pytest
from tinyfamilies import standard_spans

from kamera.diagnostics import relocation_error
from kamera.diagnostics.relocation import rope_scheme

SCHEMES = {"tiny_qwen2_5_vl": "mrope_sectioned", "tiny_qwen3_vl": "mrope_interleaved", "tiny_llava": "rope_1d",
           "tiny_deepseek_v2": "rope_1d"}
BOUND = {1: 1e-5, 100: 1e-5, 1000: 1e-5, 3000: 3e-5}  # tests/test_operator.py, float32


def worst(records: list[dict], quantity: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for r in records:
        if r["quantity"] == quantity:
            out[r["distance"]] = max(out.get(r["distance"], 0.0), r["value"])
    return out


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_fp32_relocation_error_within_the_operator_bounds(tiny, name):
    adapter = tiny(name)
    records = relocation_error(adapter, standard_spans(adapter)[-2], [*BOUND, 100_000])
    assert {r["scheme"] for r in records} == {SCHEMES[name]} == {rope_scheme(adapter)}
    assert {r["pair_layout"] for r in records} == {"interleaved" if name == "tiny_deepseek_v2" else "half"}
    assert {r["dtype"] for r in records} == {"float32"}
    assert {r["channel"] for r in records} == {s.name for s in adapter.specs if s.rotary is not None}
    assert {r["layer"] for r in records} == set(range(adapter.n_layers))
    err, floor = worst(records, "rel_err"), worst(records, "bf16_floor")
    for d, bound in BOUND.items():
        assert err[d] <= bound, (d, err[d])
    assert err[100_000] < 1.0  # the model's own float32 angles at 1e5 drift, but keys are still keys
    assert all(5e-4 <= v <= 3e-3 for v in floor.values())
    assert max(err[d] for d in BOUND) < min(floor.values())  # relocation sits far below the bf16 floor


def test_bf16_relocation_error_has_no_floor_records_and_stays_near_bf16_rounding(tiny):
    adapter = tiny("tiny_qwen2_5_vl", "bfloat16")
    records = relocation_error(adapter, standard_spans(adapter)[-2], [1, 100, 3000])
    assert {r["quantity"] for r in records} == {"rel_err"} and {r["dtype"] for r in records} == {"bfloat16"}
    layer0 = [r["value"] for r in records if r["layer"] == 0]
    assert max(layer0) <= 1e-2  # a few bf16 ulps (tests/test_operator.py: ≤ 2 ulps per element)


def test_relocation_error_rejects_bad_distances(tiny):
    adapter = tiny("tiny_llava")
    span = standard_spans(adapter)[-2]
    for bad in ([], [0], [5, -1], [2.5]):
        with pytest.raises(ValueError, match="distances"):
            relocation_error(adapter, span, bad)
