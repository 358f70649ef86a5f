"""Fig. 12(a, c) in the harness: aggregations of rows (no forward; the arms produce the rows).

(a) Per model, next-token KL to re-prefill of the chunk reused without re-rotation (arm
``unrotated``), with R(δ) only (``blind``), and with rank-8 / rank-64 patches (``patch_r8``,
``patch_r64``): mean and median of the rows' ``kl``, and how often the arm's argmax differs from
re-prefill's (1 − mean ``recovered``; over the choice letters for multiple choice).
(c) Per model and benchmark (Video-MME, EgoSchema), multiple-choice accuracy of re-prefill and of
splice + patch at ranks 8, 64, 256 (mean ``correct``), and each arm's per-item agreement with
re-prefill: the fraction of items where both answered and their ``pred`` is the same.

Items are paired on (model, dtype, bench, subset, seed, item_id); a pair key that occurs twice for
one arm (two jobs that ran the same arm on the same item) is an error, not silently averaged.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

ITEM = ("model", "dtype", "bench", "subset", "seed", "item_id")
FIG12A_ARMS = ("unrotated", "blind", "patch_r8", "patch_r64")
FIG12C_ARMS = ("patch_r8", "patch_r64", "patch_r256")
REFERENCE = "reprefill"


def _select(rows: pd.DataFrame, arms: Sequence[str], need: Sequence[str]) -> pd.DataFrame:
    missing = sorted({*ITEM, "arm", *need} - set(rows.columns))
    if missing:
        raise ValueError(f"rows lack columns {missing}")
    if not arms:
        raise ValueError("name at least one arm")
    picked = rows[rows["arm"].isin(arms)]
    if picked.empty:
        raise ValueError(f"no rows for arms {list(arms)}; the rows hold {sorted(rows['arm'].unique())}")
    dup = picked.duplicated([*ITEM, "arm"])
    if dup.any():
        first = picked[dup].iloc[0]
        raise ValueError(f"{int(dup.sum())} duplicated (item, arm) rows, e.g. {first['arm']} on {first['item_id']}: "
                         "read one group, or one config per model")
    return picked


def kl_by_arm(rows: pd.DataFrame, arms: Sequence[str] = FIG12A_ARMS) -> list[dict]:
    """Fig. 12(a). Records: ``{model, arm, n, quantity, value}``, quantity ``"kl_mean"``, ``"kl_median"``
    or ``"argmax_flip"`` (fraction of items whose argmax differs from re-prefill's)."""
    picked = _select(rows, arms, ("kl", "recovered"))
    out = []
    for (model, arm), g in picked.groupby(["model", "arm"], sort=True):
        stats = {"kl_mean": g["kl"].mean(), "kl_median": g["kl"].median(),
                 "argmax_flip": 1.0 - g["recovered"].astype(float).mean()}
        out += [{"model": model, "arm": arm, "n": len(g), "quantity": q, "value": float(v)} for q, v in stats.items()]
    return out


def mc_agreement(rows: pd.DataFrame, arms: Sequence[str] = FIG12C_ARMS, reference: str = REFERENCE) -> list[dict]:
    """Fig. 12(c). Records: ``{model, bench, arm, n, quantity, value}``; quantity ``"accuracy"`` (every
    arm, the reference included) or ``"agreement"`` (each arm's items answered as the reference answered
    them, over the items both have)."""
    picked = _select(rows, [reference, *arms], ("pred", "correct"))
    ref = picked[picked["arm"] == reference].set_index(list(ITEM))["pred"]
    if ref.empty:
        raise ValueError(f"no {reference} rows: agreement needs the reference arm")
    out = []
    for (model, bench, arm), g in picked.groupby(["model", "bench", "arm"], sort=True):
        keys = {"model": model, "bench": bench, "arm": arm}
        out.append({**keys, "n": len(g), "quantity": "accuracy", "value": float(g["correct"].mean())})
        if arm == reference:
            continue
        pred = g.set_index(list(ITEM))["pred"]
        both = pred.index.intersection(ref.index)
        agree = (pred.loc[both] == ref.loc[both]).mean() if len(both) else float("nan")
        out.append({**keys, "n": len(both), "quantity": "agreement", "value": float(agree)})
    return out
