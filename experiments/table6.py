"""Table 6: the share of the multi-hop conditioning loss each method closes at a matched KV-byte budget.

    python -m experiments.table6 experiment=table6        # paper scale (Qwen2.5-VL, n = 46; paper values beside ours)
    python -m experiments.table6 experiment=table6_tiny   # tiny scale

A cell is the mean η (1 − KL_arm / KL_blind, over items whose blind reuse measurably loses: KL_blind above
the job's floor) with its 95% cluster-bootstrap CI, for the feature patch at rank m and for each token /
low-rank-K method given the bytes of that rank-m patch (``match_rank`` m: Quest-style oracle query-aware
recompute, first-k, ShadowKV-style K reconstruction; ``kamera.arms.budget``). Methods are read from the rows
(``arm_name`` and the rank or ``match_rank`` knob), so any arm label works. Under the table, per model and
budget: the matched token budget (mean over items), the patch's bytes as a share of B's page, and the paired
bootstrap of Δη = η(patch) − η(Quest-style) over the items both have (the paper: Δη = 0.24, 95% CI
[0.07, 0.41] at rank 64). Paper: arXiv 2606.23581, Table 6.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import cli, table_outputs
from experiments.formats import cluster_labels, params, partial_tag, row_cell, with_paper
from experiments.paper import paper_or
from kamera.metrics import paired_bootstrap_ci

METHODS = {"patch": "feature patch (low-rank Δ)", "quest": "oracle query-aware (Quest-style)",
           "first_k": "first-k (EPIC/MPIC-style)", "shadowkv": "low-rank-K (ShadowKV-style)"}


def budgeted(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of the budgeted methods, with ``method`` and ``budget_rank`` (the patch rank whose bytes they get)."""
    p = params(rows)
    rank = [
        r if name == "patch" else q.get("match_rank")
        for name, r, q in zip(rows["arm_name"], rows["rank"], p, strict=True)
    ]
    out = rows.assign(
        method=rows["arm_name"],
        budget_rank=pd.to_numeric(pd.Series(rank, index=rows.index)),
        budget_tokens=[q.get("budget_tokens", np.nan) for q in p],
    )
    return out[out["method"].isin(list(METHODS)) & out["budget_rank"].notna()]


def paired_delta(g: pd.DataFrame, rank: float, other: str = "quest") -> str:
    """'0.24 [0.07, 0.41] (n = 46)': the paired bootstrap of η(patch) − η(other) at one budget."""

    def etas(method: str) -> pd.DataFrame:
        sel = g[(g["method"] == method) & (g["budget_rank"] == rank)]
        return sel.dropna(subset=["eta"]).drop_duplicates("item_id").set_index("item_id")

    a, b = etas("patch"), etas(other)
    shared = sorted(set(a.index) & set(b.index))
    if not shared:
        return "–"
    mean, lo, hi = paired_bootstrap_ci(
        a.loc[shared, "eta"].tolist(),
        b.loc[shared, "eta"].tolist(),
        clusters=cluster_labels(a.loc[shared].reset_index()),
    )
    return f"{mean:.2f} [{lo:.2f}, {hi:.2f}] (n = {len(shared)})"


def wide(rows: pd.DataFrame, paper: dict | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Methods × (model, budget) η cells plus budget rows (the paper's η, conf/experiment/table6.yaml ``paper``,
    beside the paper model's); and the paired-Δη lines."""
    paper = paper_or(paper, "table6")
    methods = paper.get("methods", {})
    data = budgeted(rows)
    if data.empty:
        raise SystemExit("no budgeted rows (patch_r<m> and quest / first_k / shadowkv arms with match_rank)")
    columns, extra, lines = {}, {}, []
    for model, m in data.groupby("model", sort=True):
        for rank in sorted(m["budget_rank"].unique()):
            g = m[m["budget_rank"] == rank]
            col = (model, f"rank-{rank:g} bytes")
            columns[col] = {
                METHODS[meth]: with_paper(
                    row_cell(g[g["method"] == meth], "eta"),
                    methods.get(meth, {}).get(rank) if model == paper.get("model") else None,
                )
                for meth in METHODS
                if (g["method"] == meth).any()
            }
            tokens = g.loc[g["method"].isin(["quest", "first_k"]), "budget_tokens"].mean()
            patch = g[g["method"] == "patch"]
            extra[col] = {
                "matched tokens (mean)": "–" if np.isnan(tokens) else f"{tokens:.1f}",
                "patch bytes (% of page)": f"{100 * patch['bytes_frac'].mean():.1f}%" if len(patch) else "–",
                "n (items with a measurable deficit)": str(g.dropna(subset=["eta"])["item_id"].nunique()),
            }
            lines.append(f"{model}, rank-{rank:g} bytes: η(patch) − η(Quest-style) = {paired_delta(m, rank)}")
    frame = pd.DataFrame(columns).reindex([v for k, v in METHODS.items() if (data["method"] == k).any()])
    frame = pd.concat([frame, pd.DataFrame(extra)]).fillna("–")
    frame.index.name = "method (η at the bytes of)"
    frame.columns = pd.MultiIndex.from_tuples(list(columns), names=["model", ""])
    return frame, lines


def render(
    rows: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    paper = paper_or(paper, "table6")
    frame, lines = wide(rows, paper)
    tag = partial_tag(footer)
    return table_outputs(
        frame,
        stem,
        f"Table 6 ({group}{tag}) — share of the conditioning loss closed (η) at a "
        "matched KV-byte budget, mean [95% cluster-bootstrap CI]",
        f"Share of the conditioning loss closed at matched KV bytes ({group}{tag}); mean η and "
        "95% cluster-bootstrap CI. " + "; ".join(lines),
        f"tab:{group}",
        footer,
        [
            "Paired bootstrap of Δη on the items both methods have:\n" + "\n".join(f"- {x}" for x in lines),
            paper["note"],
        ],
    )


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "table6", lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
