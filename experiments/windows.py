"""What the window renderers (Table 1, the turnover figure, Table 2, App. D, App. E) share.

Window rows (:mod:`kamera.job.window_shape`) carry one row per (item, probe, setting, variant); these helpers
turn them into the records :mod:`kamera.window.summary` reduces, name each model by its architecture as
the paper's tables do (GQA, deepstack, MLA, MHA) and format cells; the tables and figures are written by
:mod:`experiments.common`. Nothing here loads a model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from experiments.common import ci_cell, cluster_labels
from kamera.window.summary import mean, median

ARCH_ORDER = ("GQA", "deepstack", "MLA", "MHA")
PAPER_MODELS = ("qwen2_5_vl_7b", "qwen3_vl_8b", "kimi_vl_a3b")  # the paper's GQA, deepstack and MLA backbones


def records(rows: pd.DataFrame) -> list[dict]:
    """Window rows as plain dicts (the form :mod:`kamera.window.summary` reads); arm rows are dropped."""
    if rows.empty or "shape" not in rows:
        return []
    return rows[rows["shape"] == "window"].to_dict("records")


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
