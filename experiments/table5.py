"""Table 5: answer-flip recovery per MileBench temporal subset and pooled, and the mean KL, per arm.

    python -m experiments.table5 experiment=table5        # paper scale (Qwen2.5-VL; paper values beside ours)
    python -m experiments.table5 experiment=table5_tiny   # tiny scale (toy binding model + a tiny family)

Flip-recover (``kamera.metrics.flip_recover``): over the items whose re-prefill answer blind reuse changes
(``flip``, over the answer letters), the share on which the arm takes re-prefill's answer again
(``recovered``); a cell is that mean with its 95% cluster-bootstrap CI, "–" where no item flipped. The
pooled column pools the flipped items of every subset; "mean KL" averages KL(re-prefill ‖ arm) over all
items of the model. The n row counts flipped items (and all items in the KL column). Paper: arXiv
2606.23581, Table 5 (pooled flip subset n = 75).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.common import cli, require_rows, table_outputs
from experiments.formats import arm_table, kl_fmt, natural_order, partial_tag, row_cell, with_paper
from experiments.paper import arm_order, paper_or

SHORT = {"ActionSequence": "AS", "ActionPrediction": "AP", "ObjectShuffle": "OS", "StateChange": "SC"}
POOLED, KL = "pooled", "mean KL"


def wide(rows: pd.DataFrame, paper: dict | None = None, arms: list[str] | None = None) -> pd.DataFrame:
    """Arms × (model, subset | pooled | mean KL) cells, and an n row; the paper's values (conf/experiment/
    table5.yaml ``paper``: arm → subset | pooled | mean KL) beside the paper model's."""
    values = paper_or(paper, "table5")
    arms = natural_order(rows["arm"], arm_order(arms, "table5"))
    columns, n = {}, {}
    for model, m in rows.groupby("model", sort=True):
        paper = values.get("arms", {}) if model == values.get("model") else {}
        order = sorted(m["subset"].unique(), key=lambda s: (list(SHORT).index(s) if s in SHORT else len(SHORT), s))
        groups = [(SHORT.get(s, s), m[m["subset"] == s]) for s in order]
        for name, g in groups + ([(POOLED, m)] if len(groups) > 1 else []):
            flipped = g[g["flip"].astype(bool)]
            columns[(model, name)] = {a: with_paper(row_cell(flipped[flipped["arm"] == a], "recovered"),
                                                    paper.get(a, {}).get(name)) for a in arms}
            n[(model, name)] = f"{flipped['item_id'].nunique()} flipped"
        columns[(model, KL)] = {a: with_paper(row_cell(m[m["arm"] == a], "kl", fmt=kl_fmt), paper.get(a, {}).get(KL),
                                              kl_fmt) for a in arms if (m["arm"] == a).any()}
        n[(model, KL)] = f"{m['item_id'].nunique()} items"
    return arm_table(columns, n, arms)


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None, arms: list[str] | None = None) -> tuple[str, list[Path]]:
    require_rows(rows, group)
    paper, tag = paper_or(paper, "table5"), partial_tag(footer)
    return table_outputs(
        wide(rows, paper, arms),
        stem,
        f"Table 5 ({group}{tag}) — flip-recover on the items blind reuse flips, "
        "mean [95% cluster-bootstrap CI]; mean KL to re-prefill",
        f"Answer-flip recovery per subset and pooled, and mean KL ({group}{tag}); mean and 95% "
        "cluster-bootstrap CI over flipped items.",
        f"tab:{group}",
        footer,
        [paper["note"]],
    )


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "table5",
        lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper, exp.arms),
        argv,
    )


if __name__ == "__main__":
    main()
