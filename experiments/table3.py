"""Table 3: MM-NIAH accuracy per model × subset × arm, with bootstrap CIs, the chance row and n.

    python -m experiments.table3 experiment=table3        # paper scale (paper values printed beside ours)
    python -m experiments.table3 experiment=table3_tiny   # tiny scale (toy binding model + tiny families)

Reads exactly the experiment's jobs (``experiments.common.load``); writes <paths.tables>/<experiment>.md
and .tex (booktabs), each with the provenance footer, and prints the markdown.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.common import cli, table_outputs
from experiments.formats import accuracy_cell, natural_order, partial_tag
from experiments.panels import selection_note
from experiments.paper import paper_or

ARM_ORDER = ["reprefill", "blind", "patch_r16", "patch_r64"]


def aggregate(rows: pd.DataFrame, paper: dict | None = None) -> pd.DataFrame:
    """One line per (model, subset, arm): n, accuracy and its 95% CI cell (the cluster bootstrap: items sharing a
    ``cluster_key`` resampled together, :func:`experiments.common.row_cell`); chance per (model, subset); the
    paper's value (``paper["accuracy"][model][subset][arm]``) where it has one."""
    accuracy = paper_or(paper, "table3").get("accuracy", {})
    out = []
    for (model, subset, arm), g in rows.groupby(["model", "subset", "arm"], sort=True):
        out.append({
            "model": model, "subset": subset, "arm": arm, "n": len(g),
            "accuracy": g["correct"].mean(), "cell": accuracy_cell(g),
            "chance": (1.0 / g["n_choices"][g["n_choices"] > 0]).mean(),
            "paper": accuracy.get(model, {}).get(subset, {}).get(arm),
        })
    return pd.DataFrame(out)


def wide(agg: pd.DataFrame) -> pd.DataFrame:
    """Arms × (model, subset) cells, paper values beside ours where they exist, chance / n last: n is the items that
    ran in the column (a model's valid items, see the config's ``selection_rule``), and a cell whose arm ran on
    fewer says its own n."""
    cols = sorted({(m, s) for m, s in zip(agg["model"], agg["subset"], strict=True)})
    table = {}
    for col in cols:
        g = agg[(agg["model"] == col[0]) & (agg["subset"] == col[1])].set_index("arm")
        n = int(g["n"].max())
        cells = {a: g.at[a, "cell"] + (f" (n {g.at[a, 'n']})" if g.at[a, "n"] != n else "")
                 + (f" (paper {g.at[a, 'paper']:.2f})" if pd.notna(g.at[a, "paper"]) else "") for a in g.index}
        cells["chance / n"] = f"{g['chance'].iloc[0]:.2f} / {n}"
        table[col] = cells
    frame = pd.DataFrame(table)
    frame = frame.reindex([*natural_order(agg["arm"].unique(), ARM_ORDER), "chance / n"])
    frame.columns = pd.MultiIndex.from_tuples(cols, names=["model", "subset"])
    return frame.fillna("–")


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None,
           selection: str = "") -> tuple[str, list[Path]]:
    """``selection``: which items count (:func:`experiments.panels.selection_note`), printed under the table."""
    tag = partial_tag(footer)
    notes = [selection] if selection else []
    return table_outputs(
        wide(aggregate(rows, paper)),
        stem,
        f"Table 3 ({group}{tag})",
        f"Accuracy per arm ({group}{tag}); mean and 95\\% cluster-bootstrap CI over items.",
        f"tab:{group}",
        footer,
        notes,
        math=False,
        subtitle="accuracy, mean [95% cluster-bootstrap CI]",
        index_label="arm",
    )


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "table3",
        lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper, selection_note(exp)),
        argv,
    )


if __name__ == "__main__":
    main()
