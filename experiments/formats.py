"""How a renderer writes a number: CI cells (the seeded cluster bootstrap), the paper's value beside ours, arm
orders, and markdown and booktabs LaTeX tables (pdflatex-safe symbols). Pure functions of rows and frames."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from kamera.metrics import bootstrap_ci


def ci_cell(
    values,
    seed: int = 0,
    clusters: list | None = None,
    fmt: Callable[[float], str] = "{:.2f}".format,
    stat: Callable[[np.ndarray], float] = np.mean,
) -> str:
    """'0.59 [0.46, 0.71]': the statistic (mean by default) and its seeded 95% bootstrap interval, over
    items or over ``clusters`` (one label per value, see :func:`cluster_labels`); '–' when no value."""
    mean, lo, hi = bootstrap_ci(list(values), stat, seed=seed, clusters=clusters)
    return "–" if pd.isna(mean) else f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def partial_tag(footer: str) -> str:
    """', partial' when the footer says some jobs were incomplete (the title then says so too)."""
    return ", partial" if footer.startswith("PARTIAL") else ""


def cluster_labels(rows: pd.DataFrame) -> list[str]:
    """One bootstrap cluster per row: its ``cluster_key`` (several questions on one document or video are
    resampled together), else its own item (every item its own cluster)."""
    keys = rows["cluster_key"] if "cluster_key" in rows else [None] * len(rows)
    return [k if isinstance(k, str) and k else f"item:{i}" for k, i in zip(keys, rows["item_id"], strict=True)]


def interval(
    rows: pd.DataFrame, column: str, stat: Callable[[np.ndarray], float] = np.mean, seed: int = 0
) -> tuple[float, float, float]:
    """(statistic, low, high) of ``rows[column]``: the cluster bootstrap over the rows' items (NaNs dropped)."""
    return bootstrap_ci(rows[column].astype(float).tolist(), stat, seed=seed, clusters=cluster_labels(rows))


def row_cell(
    rows: pd.DataFrame,
    column: str,
    fmt: Callable[[float], str] = "{:.2f}".format,
    stat: Callable[[np.ndarray], float] = np.mean,
) -> str:
    """:func:`ci_cell` of ``rows[column]`` with the rows' clusters."""
    return ci_cell(rows[column].astype(float).tolist(), clusters=cluster_labels(rows), fmt=fmt, stat=stat)


def stuck_rate(rows: pd.DataFrame) -> float:
    """The share of ``rows``' generated answers that stopped making progress (docs/metrics.md "Stuck rate"); NaN where
    none was generated (logit-scored rows, and rows of code before the measure: a null ``stuck``)."""
    stuck = rows["stuck"].astype(float).dropna() if "stuck" in rows else pd.Series(dtype=float)
    return float(stuck.mean()) if len(stuck) else math.nan


def with_stuck(cell: str, rate: float) -> str:
    """An accuracy cell with its generations' stuck rate beside it ("0.31 [0.12, 0.56] · stuck 0.25"), where any."""
    return cell if math.isnan(rate) else f"{cell} · stuck {rate:.2f}"


def accuracy_cell(rows: pd.DataFrame) -> str:
    """An accuracy cell (:func:`row_cell` of ``correct``) with its answers' stuck rate (:func:`with_stuck`)."""
    return with_stuck(row_cell(rows, "correct"), stuck_rate(rows))


def kl_fmt(value: float) -> str:
    """A KL in two significant digits: '0.025', '1.2e-05'."""
    return f"{value:.2g}"


def with_paper(cell: str, paper: float | str | None, fmt: Callable[[float], str] = "{:.2f}".format) -> str:
    """``cell`` with the paper's value beside it, '0.41 [0.3, 0.5] (paper 0.41)', where the paper has one."""
    if paper is None or (isinstance(paper, float) and np.isnan(paper)):
        return cell
    return f"{cell} (paper {paper if isinstance(paper, str) else fmt(paper)})"


def params(rows: pd.DataFrame) -> pd.Series:
    """Each row's arm parameters (its knobs and what the arm reported) as a dict."""
    return rows["params"].map(json.loads)


def natural_order(labels, first: list[str] = ()) -> list[str]:
    """The labels of ``first`` (and their knob variants, ``shallow_reprefill[reuse_layers=1]``) in its order,
    then the rest in natural order (patch_r8 < patch_r16 < patch_full)."""

    def key(label: str) -> list:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(label).replace("_full", "_r1000000"))]

    present = sorted(dict.fromkeys(labels), key=key)
    head = [a for f in first for a in present if str(a).split("[", 1)[0] == f]
    return head + [a for a in present if a not in head]


def markdown_rows(header: list[str], rows: list[list]) -> list[str]:
    """Markdown table lines: the header, the separator and one line per row (cells as ``str``)."""
    return [
        "| " + " | ".join(map(str, header)) + " |",
        "|---" * len(header) + "|",
        *["| " + " | ".join(map(str, r)) + " |" for r in rows],
    ]


def document(lines: list[str], footer: str = "") -> str:
    """Markdown lines, the footer last (in italics, after a blank line)."""
    return "\n".join([*lines, *([f"\n_{footer}_"] if footer else [])]) + "\n"


def markdown_table(frame: pd.DataFrame, title: str, footer: str = "", notes: list[str] = (), subtitle: str = "") -> str:
    """A markdown table of ``frame`` (its index levels the first columns; tuple column names joined by ' · ')
    under the bold ``title`` (and `` — subtitle`` in plain type), each note below it after a blank line and
    the footer last."""
    names = [" · ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in frame.columns]
    index = [str(n or "") for n in frame.index.names]
    body = [[*(i if isinstance(i, tuple) else (i,)), *row] for i, row in frame.iterrows()]
    head = f"**{title}**" + (f" — {subtitle}" if subtitle else "")
    return document([head, "", *markdown_rows([*index, *names], body), *[f"\n{n}" for n in notes]], footer)


LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
# the symbols tables print, as math a pdflatex document needs no package for (– and — pass as UTF-8 text)
LATEX_SYMBOLS = {
    "η": r"$\eta$",
    "Δ": r"$\Delta$",
    "≈": r"$\approx$",
    "∼": r"$\sim$",
    "−": r"$-$",
    "×": r"$\times$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "≡": r"$\equiv$",
    "·": r"$\cdot$",
    "→": r"$\to$",
    "ℓ": r"$\ell$",
    "§": r"\S{}",
}


def latex_text(text: str) -> str:
    """Plain text as LaTeX: special characters escaped (symbols are mapped by :func:`latex_table`)."""
    return "".join(LATEX_ESCAPES.get(c, c) for c in text)


def latex_table(frame: pd.DataFrame, caption: str, label: str, footer: str = "", math: bool = True) -> str:
    """``frame`` as a booktabs LaTeX table, cells escaped, the footer as a leading comment. ``math``: the
    plain-text ``caption`` escaped too and symbols set as math, so pdflatex compiles it without a unicode
    package (the row index's name dropped); ``math=False``: the caption is LaTeX already, the index names are
    kept and symbols stay UTF-8 (Tables 1–3, App. D / E)."""
    styler = (frame.rename_axis(None) if math else frame).style.format(escape="latex")
    styler = styler.format_index(escape="latex", axis=0).format_index(escape="latex", axis=1)
    tex = styler.to_latex(
        hrules=True,
        caption=latex_text(caption) if math else caption,
        label=label,
        column_format="l" + "c" * len(frame.columns),
        multicol_align="c",
        position_float="centering",
    )
    if math:
        tex = "".join(LATEX_SYMBOLS.get(c, c) for c in tex)
    return f"% {footer}\n{tex}" if footer else tex


def arm_table(
    columns: dict[tuple[str, str], dict[str, str]], counts: dict[tuple[str, str], str], arms: list[str]
) -> pd.DataFrame:
    """Arms × (model, column) cells ('–' where an arm has none), with a last row ``n`` of counts."""
    frame = pd.DataFrame(columns).reindex(arms).fillna("–")
    frame.loc["n"] = pd.Series(counts)
    frame.index.name = "arm"
    frame.columns = pd.MultiIndex.from_tuples(list(columns), names=["model", ""])
    return frame
