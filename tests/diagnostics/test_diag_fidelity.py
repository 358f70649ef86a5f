"""Fig. 12(a, c) aggregations of rows: KL by arm, MC accuracy and per-item agreement with re-prefill."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from kamera.diagnostics import kl_by_arm, mc_agreement


def rows(spec: dict[str, list[tuple]]) -> pd.DataFrame:
    """spec: arm → [(item_id, kl, recovered, pred, correct)] for one model / bench."""
    out = []
    for arm, items in spec.items():
        for item_id, k, rec, pred, correct in items:
            out.append({"model": "m", "dtype": "float32", "bench": "videomme", "subset": "short", "seed": 0,
                        "item_id": item_id, "arm": arm, "kl": k, "recovered": rec, "pred": pred,
                        "correct": correct})
    return pd.DataFrame(out)


SPEC = {
    "reprefill": [("1", 0.0, True, "A", 1.0), ("2", 0.0, True, "B", 0.0), ("3", 0.0, True, "C", 1.0)],
    "blind": [("1", 0.3, False, "B", 0.0), ("2", 0.1, True, "B", 0.0), ("3", 0.5, False, "A", 0.0)],
    "unrotated": [("1", 2.0, False, "D", 0.0), ("2", 1.0, False, "D", 0.0), ("3", 3.0, False, "D", 0.0)],
    "patch_r8": [("1", 0.01, True, "A", 1.0), ("2", 0.02, True, "B", 0.0), ("3", 0.2, False, "A", 0.0)],
    "patch_r64": [("1", 0.001, True, "A", 1.0), ("2", 0.002, True, "B", 0.0)],  # item 3 missing
}


def table(records: list[dict], *keys: str) -> dict:
    return {tuple(r[k] for k in keys): r["value"] for r in records}


def test_kl_by_arm():
    got = table(kl_by_arm(rows(SPEC)), "arm", "quantity")
    assert got[("unrotated", "kl_mean")] == pytest.approx(2.0) and got[("unrotated", "kl_median")] == 2.0
    assert got[("blind", "argmax_flip")] == pytest.approx(2 / 3)
    assert got[("patch_r64", "kl_mean")] == pytest.approx(0.0015)
    assert {a for a, _ in got} == {"unrotated", "blind", "patch_r8", "patch_r64"}
    n = {r["arm"]: r["n"] for r in kl_by_arm(rows(SPEC))}
    assert n == {"unrotated": 3, "blind": 3, "patch_r8": 3, "patch_r64": 2}


def test_mc_agreement():
    records = mc_agreement(rows(SPEC), arms=("patch_r8", "patch_r64", "blind"))
    got = table(records, "arm", "quantity")
    assert got[("reprefill", "accuracy")] == pytest.approx(2 / 3)
    assert ("reprefill", "agreement") not in got
    assert got[("patch_r8", "agreement")] == pytest.approx(2 / 3)
    assert got[("patch_r64", "agreement")] == 1.0 and got[("patch_r64", "accuracy")] == 0.5
    assert got[("blind", "agreement")] == pytest.approx(1 / 3)
    n = {(r["arm"], r["quantity"]): r["n"] for r in records}
    assert n[("patch_r64", "agreement")] == 2 and n[("patch_r8", "agreement")] == 3


def test_agreement_pairs_items_within_a_model():
    other = rows({"patch_r8": [("1", 0.0, True, "A", 1.0)]}).assign(model="other")
    both = pd.concat([rows(SPEC), other])
    got = table(mc_agreement(both, arms=("patch_r8",)), "model", "arm", "quantity")
    assert math.isnan(got[("other", "patch_r8", "agreement")])  # no reprefill rows for that model
    assert got[("m", "patch_r8", "agreement")] == pytest.approx(2 / 3)


def test_bad_rows_are_refused():
    good = rows(SPEC)
    with pytest.raises(ValueError, match="duplicated"):
        kl_by_arm(pd.concat([good, good]))
    with pytest.raises(ValueError, match="lack columns"):
        kl_by_arm(good.drop(columns="kl"))
    with pytest.raises(ValueError, match="no rows for arms"):
        kl_by_arm(good, arms=("patch_r256",))
    with pytest.raises(ValueError, match="at least one arm"):
        kl_by_arm(good, arms=())
    with pytest.raises(ValueError, match="no reprefill rows"):
        mc_agreement(good[good["arm"] != "reprefill"])
