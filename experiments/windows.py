"""What the window renderers (Table 1, the turnover figure, Table 2, App. D, App. E) share.

Window rows (:mod:`kamera.window.shape`) carry one row per (item, probe, setting, variant); these helpers
turn them into records, reduce them (:func:`table1`: recall at full turnover and the survivor;
:func:`turnover_curve`: η against τ for the stale and the fresh patch formed at the recall), name each model by its
architecture as the paper's tables do (GQA, deepstack, MLA, MHA) and format cells; the tables and figures are written by
:mod:`experiments.common`. Pure functions of rows: nothing here loads a model or imports forward code.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from experiments.formats import ci_cell, cluster_labels
from kamera.metrics import flip_recover

ARCH_ORDER = ("GQA", "deepstack", "MLA", "MHA")
PAPER_MODELS = ("qwen2_5_vl_7b", "qwen3_vl_8b", "kimi_vl_a3b")  # the paper's GQA, deepstack and MLA backbones


def records(rows: pd.DataFrame) -> list[dict]:
    """Window rows as plain dicts (the form the reductions below read); arm rows are dropped."""
    if rows.empty or "shape" not in rows:
        return []
    return rows[rows["shape"] == "window"].to_dict("records")


def mean(values: Iterable[float]) -> float:
    """Mean over the finite values (NaN if none)."""
    v = [x for x in values if x == x]
    return statistics.fmean(v) if v else math.nan


def median(values: Iterable[float]) -> float:
    v = [x for x in values if x == x]
    return statistics.median(v) if v else math.nan


def select(rows: Iterable[dict], **keys) -> list[dict]:
    """The rows whose columns equal ``keys``."""
    return [r for r in rows if all(r.get(k) == v for k, v in keys.items())]


RECALL = {"stale": "stale_patch", "stored": "stored_patch", "exact": "fresh_exact"}  # Table 1's recall variants
FRESH = RECALL["exact"]  # the paper's fresh patch: re-formed on the window the chunk is recalled behind


@dataclass
class Table1Row:
    """One model's Table 1 line: recall at full turnover (per :data:`RECALL` variant: mean KL, mean forwards at
    the recall, flip-recover) and the survivor probe."""

    model: str
    n_recall: int
    n_flips: int
    recall_kl: dict[str, float]
    recall_forwards: dict[str, float]
    flip_recovers: dict[str, float]
    n_survivor: int
    keep_kl: float
    keep_kl_over_blind: float
    removal_eta: float
    removal_eta_keep: float


def table1(rows: Sequence[dict], model: str, tau: float = 1.0) -> Table1Row:
    """Table 1's numbers for one model from its recall and survivor rows (recall at turnover ``tau``)."""
    rec = select(rows, model=model, probe="recall", tau=tau)
    got = {name: select(rec, variant=variant) for name, variant in RECALL.items()}
    stale = got["stale"]
    surv = select(rows, model=model, probe="survivor")
    keep, removal = select(surv, variant="keep_as_is"), select(surv, variant="removal_patch")
    return Table1Row(
        model, len(stale), sum(r["flip"] for r in stale),
        {name: mean_of(g, "kl") for name, g in got.items()},
        {name: mean_of(g, "forwards") for name, g in got.items()},
        {name: flip_recover([r["flip"] for r in g], [r["recovered"] for r in g]) for name, g in got.items()},
        len(keep), mean(r["kl"] for r in keep),
        mean(r["kl"] / r["kl_blind"] if r["kl_blind"] > 0 else math.nan for r in keep),
        mean(r["eta"] for r in removal), mean(r["eta_keep"] for r in removal),
    )


def turnover_curve(rows: Sequence[dict], model: str) -> list[dict]:
    """Per τ: mean and median η of the stale and the fresh patch, and the re-prefill's accuracy."""
    rec = select(rows, model=model, probe="recall")
    out = []
    for tau in sorted({r["tau"] for r in rec}):
        at = select(rec, tau=tau)
        stale, fresh = select(at, variant=RECALL["stale"]), select(at, variant=FRESH)
        out.append({
            "tau": tau, "n": len(stale),
            "stale_eta": mean(r["eta"] for r in stale), "stale_eta_median": median(r["eta"] for r in stale),
            "fresh_eta": mean(r["eta"] for r in fresh), "fresh_eta_median": median(r["eta"] for r in fresh),
            "stale_kl": mean(r["kl"] for r in stale), "blind_kl": mean(r["kl_blind"] for r in stale),
            "reprefill_correct": mean(r["correct"] for r in select(at, variant="reprefill")),
            "stale_correct": mean(r["correct"] for r in stale),
        })
    return out


def arch(family: str, attention: str) -> str:
    """The architecture label of a model (deepstack for the Qwen3-VL family, else its attention kind)."""
    return "deepstack" if str(family).startswith("qwen3_vl") else str(attention)


def models(recs: Iterable[dict]) -> list[tuple[str, str]]:
    """(model, architecture) of every model in the rows: the paper's first, the toy next, then by architecture."""
    seen = {r["model"]: arch(r["family"], r["attention"]) for r in recs}

    def order(m: str) -> tuple:
        a = seen[m]
        return (m not in PAPER_MODELS, PAPER_MODELS.index(m) if m in PAPER_MODELS else 0, not m.startswith("toy"),
                ARCH_ORDER.index(a) if a in ARCH_ORDER else len(ARCH_ORDER), m)

    return [(m, seen[m]) for m in sorted(seen, key=order)]


def num(x: float, digits: int = 2) -> str:
    """A number for a cell: fixed point, scientific below 0.01 in magnitude, "–" for NaN / None."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x != 0 and abs(x) < 10 ** -digits:
        return f"{x:.1e}"
    return f"{x:.{digits}f}"


def eta_cell(recs: Iterable[dict], column: str = "eta") -> str:
    """'0.87 [0.80, 0.93] (med 0.91, n 25)': the mean of ``column`` (η by default) over the rows ``recs`` and its
    95% cluster-bootstrap CI, the median and the measurable n (rows whose KL_blind is below the floor have η =
    NaN and do not count). The bootstrap resamples clusters (:func:`experiments.common.cluster_labels`): the
    questions on one video share a ``cluster_key`` and the rows of one item (a fork's branches) are one draw,
    so the CI is not the narrower one of independent rows; ", k clusters" follows n where there are fewer."""
    got = [r for r in recs if r[column] == r[column]]
    if not got:
        return "– (no measurable deficit)"
    values, clusters = [r[column] for r in got], cluster_labels(pd.DataFrame(got))
    k = len(set(clusters))
    return f"{ci_cell(values, clusters=clusters)} (med {num(median(values))}, n {len(values)}" \
        + (f", {k} cluster{'s' * (k > 1)})" if k < len(values) else ")")


def paper(value: float | None, digits: int = 2) -> str:
    """' (paper 0.87)' beside our number, or nothing."""
    return "" if value is None else f" (paper {value:+.{digits}f})" if value < 0 else f" (paper {value:.{digits}f})"


def mean_of(recs: Iterable[dict], column: str) -> float:
    return mean(r[column] for r in recs)


def ratio(a: float, b: float) -> float:
    """a / b, NaN where b is 0 or either is NaN."""
    return a / b if b and b == b and a == a else math.nan
