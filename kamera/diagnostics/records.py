"""The record-level summaries the renderers read: pure functions of stored probe records (no model, no forward),
so ``experiments/`` reads them without importing the measurement code that wrote the records.

    signal_spearman   Fig. 4(b): Spearman's ρ of ‖Δ_i‖ with each video signal (:mod:`kamera.diagnostics.video`)
    cumulative        Fig. 11(c): cumulative time after N reuses and break-even N (:mod:`kamera.diagnostics.ttft`)
    RANDOM            the random selector's name in Fig. 4(a) records (:mod:`kamera.diagnostics.selectors`)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from kamera.knobs import check_counts

RANDOM = "random"
SIGNALS = ("motion", "warp_residual", "frame_similarity", "embed_diff")
DELTA = "delta_norm"


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ (Pearson correlation of average ranks); NaN if either side is constant or n < 2."""
    rx, ry = pd.Series(x, dtype=float).rank().to_numpy(), pd.Series(y, dtype=float).rank().to_numpy()
    if len(rx) != len(ry):
        raise ValueError(f"spearman needs equal lengths, got {len(rx)} and {len(ry)}")
    if len(rx) < 2 or rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def signal_spearman(records: Sequence[dict] | pd.DataFrame, by: Sequence[str] = ()) -> list[dict]:
    """Spearman's ρ of ‖Δ_i‖ with each signal, over the tokens of each ``by`` group (all pooled if empty).

    Takes :func:`token_signals` records, with whatever item keys the store added: every key other
    than quantity / value identifies a token, so tokens of different items stay apart when pooled.
    Records: ``{**group keys, signal, quantity: "spearman", value, n_tokens}``."""
    frame = pd.DataFrame(records)
    need = {"token", "frame", "quantity", "value", *by}
    if frame.empty or not need <= set(frame.columns):
        raise ValueError(f"signal_spearman needs token_signals records with keys {sorted(need)}")
    keys = [c for c in frame.columns if c not in ("quantity", "value")]
    if frame.duplicated([*keys, "quantity"]).any():
        raise ValueError("token records repeat a (token, quantity): records of different items need their item key")
    wide = frame.pivot(index=keys, columns="quantity", values="value")
    missing = [q for q in (DELTA, *SIGNALS) if q not in wide.columns]
    if missing:
        raise ValueError(f"token records lack quantities {missing}")
    groups = wide.groupby(level=list(by)) if by else [((), wide)]
    out = []
    for key, g in groups:
        labels = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        for s in SIGNALS:
            out.append({**labels, "signal": s, "quantity": "spearman",
                        "value": spearman(g[DELTA], g[s]), "n_tokens": len(g)})
    return out


# ----- the cost model ----------------------------------------------------------------------------
def break_even(form: float, reuse: float, baseline: float) -> int | None:
    """Smallest N ≥ 1 with form + N·reuse ≤ N·baseline, or None if reuse is not cheaper than the baseline."""
    if min(form, reuse, baseline) < 0:
        raise ValueError(f"times must be ≥ 0, got form {form}, reuse {reuse}, baseline {baseline}")
    if baseline <= reuse:
        return None
    return max(1, math.ceil(form / (baseline - reuse) - 1e-12))


def cumulative(records: Sequence[dict], n_max: int = 32) -> list[dict]:
    """Fig. 11(c) from :func:`ttft` records: cumulative time after N = 0 … n_max reuses, and break-even N.

    Records: ``{n_b, rank, n_reuse, quantity, value}``; quantity ``"kamera_ms"``, ``"prefill_ms"``,
    ``"recompute_ms"`` (per N), or ``"break_even_prefill"`` / ``"break_even_recompute"`` (``n_reuse``
    None, value NaN where reuse never pays off)."""
    (n_max,) = check_counts("ttft", "n_max", [n_max])
    by_size: dict[int, dict] = {}
    for r in records:
        by_size.setdefault(r["n_b"], {})[(r["quantity"], r["rank"])] = r["value"]
    if not by_size:
        raise ValueError("no ttft records")
    out = []
    for n_b, t in sorted(by_size.items()):
        try:
            form, prefill, vision = t[("form_ms", None)], t[("prefill_ms", None)], t[("vision_ms", None)]
        except KeyError as missing:
            raise ValueError(f"ttft records for n_b = {n_b} lack {missing.args[0][0]}") from None
        for (_, rank), reuse in sorted((k, v) for k, v in t.items() if k[0] == "reuse_ms"):
            keys = {"n_b": n_b, "rank": rank}
            for n in range(n_max + 1):
                for name, v in (("kamera_ms", form + n * reuse), ("prefill_ms", n * prefill),
                                ("recompute_ms", n * (vision + prefill))):
                    out.append({**keys, "n_reuse": n, "quantity": name, "value": v})
            for name, base in (("break_even_prefill", prefill), ("break_even_recompute", vision + prefill)):
                n_star = break_even(form, reuse, base)
                out.append({**keys, "n_reuse": None, "quantity": name, "value": math.nan if n_star is None else n_star})
    return out
