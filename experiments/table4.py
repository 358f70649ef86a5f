"""Table 4: two-page multi-hop doc QA accuracy per arm, with the KV bytes of each arm and the single-hop control.

    python -m experiments.table4 experiment=table4        # paper scale (MMLongBench-Doc; paper values beside ours)
    python -m experiments.table4 experiment=table4_tiny   # tiny scale (toy binding model + tiny families)

One accuracy column per (model, subset): multi-hop (MMLongBench-Doc's two_page items; the toy model's
two_hop; the synthetic benchmark's items) and the single-hop control (one_page: the evidence page is B and
A a page without it; the toy model's control_b, answered from B alone). Cells are the mean accuracy and its
95% bootstrap CI over documents (items sharing a ``cluster_key`` are resampled together). One bytes
column per model: each arm's KV bytes for B as a share of B's full page (mean over items), the paper's
"≈ 6% / 25%" at rank 16 / 64 beside ours. Paper: arXiv 2606.23581, Table 4 and §1 ("single-hop accuracy
is unchanged under reuse (0.57)").
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.common import cli, require_rows, table_outputs
from experiments.formats import accuracy_cell, arm_table, natural_order, partial_tag, with_paper
from experiments.paper import arm_order, paper_or

SUBSETS = {"two_page": "multi-hop", "one_page": "single-hop", "two_hop": "multi-hop", "bind": "multi-hop",
           "control_b": "single-hop (B)", "control": "single-hop (A)"}


def subset_label(subset: str) -> str:
    return f"{SUBSETS[subset]} ({subset})" if subset in SUBSETS else subset


def wide(rows: pd.DataFrame, paper: dict | None = None, arms: list[str] | None = None) -> pd.DataFrame:
    """Arms × (model, accuracy per subset | bytes) cells, and an n row (items per column); the paper's values
    (conf/experiment/table4.yaml ``paper``) beside ours."""
    paper = paper_or(paper, "table4")
    accuracy, paper_bytes = paper.get("accuracy", {}), paper.get("bytes", {})
    arms = natural_order(rows["arm"], arm_order(arms, "table4"))
    columns, n = {}, {}
    for model, m in rows.groupby("model", sort=True):
        # multi-hop columns first, then the controls
        subsets = sorted(m["subset"].unique(), key=lambda s: (not SUBSETS.get(s, "").startswith("multi"), s))
        for subset in subsets:
            g = m[m["subset"] == subset]
            values = accuracy.get(model, {}).get(subset, {})
            columns[(model, subset_label(subset))] = {
                a: with_paper(accuracy_cell(g[g["arm"] == a]), values.get(a)) for a in arms
                if (g["arm"] == a).any()}
            n[(model, subset_label(subset))] = str(g["item_id"].nunique())
        columns[(model, "KV bytes")] = {
            a: with_paper(f"{100 * m.loc[m['arm'] == a, 'bytes_frac'].mean():.1f}%",
                          paper_bytes.get(a) if model in accuracy else None)
            for a in arms if (m["arm"] == a).any()}
        n[(model, "KV bytes")] = ""
    return arm_table(columns, n, arms)


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None, arms: list[str] | None = None) -> tuple[str, list[Path]]:
    require_rows(rows, group)
    paper, tag = paper_or(paper, "table4"), partial_tag(footer)
    return table_outputs(
        wide(rows, paper, arms),
        stem,
        f"Table 4 ({group}{tag}) — accuracy, mean [95% cluster-bootstrap CI]; KV bytes for B as % of its page",
        f"Two-page multi-hop accuracy and KV bytes per arm ({group}{tag}); mean and 95% "
        "cluster-bootstrap CI over documents.",
        f"tab:{group}",
        footer,
        [paper["note"]],
    )


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "table4",
        lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper, exp.arms),
        argv,
    )


if __name__ == "__main__":
    main()
