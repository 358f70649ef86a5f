"""The bf16 reference floor: the KL to re-prefill that bf16 rounding alone leaves, beside float32 patch factors.

    python -m experiments.bf16_floor experiment=bf16_floor        # Fig. 12's four backbones on Video-MME, bf16
    python -m experiments.bf16_floor experiment=bf16_floor_tiny   # make bf16_floor (tiny families, bf16 and float32)

The floor is the full-rank patch with factors in the model's dtype (``patch_full``): its KV is re-prefill's KV(B|A)
up to the rounding of the stored factors and of their sum, so its KL to re-prefill is what bf16 storage alone
moves; an arm whose KL sits at it is at rounding, not short of the deficit (the paper, §6: the KV "within one bf16
unit of recompute", residual KL ≈ 1e-3). Beside it the full-rank patch with float32 factors (``patch_full_fp32``:
added in float32 and rounded once, it lands on KV(B|A) but for rounding ties, so what is left is the query
forward's own arithmetic) and the rank-16 / 64 patches with model-dtype and float32 factors: KL, η and bytes.
Writes <paths.tables>/<experiment>.md and .tex: one line per (model, dtype); KLs are medians [95%
cluster-bootstrap CI] over items, η means, bytes the patch's share of B's page.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import cli, require_rows, table_outputs
from experiments.formats import kl_fmt, latex_text, partial_tag, row_cell, with_paper
from experiments.paper import paper_or

FLOOR, EXACT = "patch_full", "patch_full_fp32"
RANKS = (16, 64)


def _kl(rows: pd.DataFrame) -> str:
    return row_cell(rows, "kl", fmt=kl_fmt, stat=np.median) if len(rows) else "–"


def _pair(rows: pd.DataFrame, arm: str, fmt) -> str:
    """'model-dtype / float32 factors' of one cell (``fmt`` of the rows) for ``arm`` and its ``_fp32`` twin
    ('–' where absent)."""
    cells = []
    for label in (arm, f"{arm}_fp32"):
        g = rows[rows["arm"] == label]
        cells.append(fmt(g) if len(g) else "–")
    return " / ".join(cells)


def frame(rows: pd.DataFrame, values: dict | None = None) -> pd.DataFrame:
    """One line per (model, dtype): KL of blind, of the floor and of the float32 full-rank patch, blind over floor,
    and per rank the model-dtype / float32-factor η and bytes; the paper's values beside its models' bf16 lines."""
    values = paper_or(values, "bf16_floor")
    stated, kl_paper = set(values.get("models", [])), values.get("kl", {})
    out = {}
    for (model, dtype), g in rows.groupby(["model", "dtype"], sort=True):
        by = {a: g[g["arm"] == a] for a in g["arm"].unique()}
        blind, floor = by.get("blind", g.iloc[:0]), by.get(FLOOR, g.iloc[:0])
        cited = model in stated and dtype == "bfloat16"
        ratio = (
            float(blind["kl"].median()) / float(floor["kl"].median())
            if len(blind) and len(floor) and float(floor["kl"].median()) > 0
            else float("nan")
        )
        line = [
            with_paper(_kl(blind), kl_paper.get("blind") if cited else None),
            with_paper(_kl(floor), kl_paper.get("floor") if cited else None),
            _kl(by.get(EXACT, g.iloc[:0])),
            "–" if np.isnan(ratio) else f"{ratio:.3g}×",
        ]
        for r in RANKS:
            line.append(_pair(g, f"patch_r{r}", _kl))
            line.append(_pair(g, f"patch_r{r}", lambda x: f"{x['eta'].mean():.3f}"))
            line.append(_pair(g, f"patch_r{r}", lambda x: f"{100 * x['bytes_frac'].mean():.1f}%"))
        line.append(str(g["item_id"].nunique()))
        out[(model, dtype)] = line
    columns = ["KL blind", "floor: KL full rank, model-dtype factors", "KL full rank, float32 factors", "blind / floor"]
    for r in RANKS:
        columns += [f"r{r} KL (model / float32 factors)", f"r{r} η (model / float32)", f"r{r} bytes (model / float32)"]
    table = pd.DataFrame.from_dict(out, orient="index", columns=[*columns, "n"])
    table.index = pd.MultiIndex.from_tuples(table.index, names=["model", "dtype"]) if len(table) else table.index
    return table


def render(
    rows: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    require_rows(rows, group)
    values, tag = paper_or(paper, "bf16_floor"), partial_tag(footer)
    if not (rows["arm"] == FLOOR).any():
        raise SystemExit(f"{group} has no {FLOOR} rows: the floor is its KL")
    table = frame(rows, values)
    notes = [
        "Floor: the full-rank patch with factors in the model's dtype, whose KV is re-prefill's up to the "
        "rounding of its stored factors: its KL to re-prefill is what the dtype's rounding alone moves, and a "
        "residual at it is rounding, not a deficit. Float32 factors: the patch added in float32 and rounded to "
        "the cache's dtype once (twice the bytes). KL: median [95% cluster-bootstrap CI] over items; η: mean "
        "over items with a measurable deficit; bytes: the patch over B's KV page."
    ]
    if any(m in values.get("models", []) for m in table.index.get_level_values(0)):
        notes.append(values["note"])
    return table_outputs(
        table,
        stem,
        f"bf16 reference floor ({group}{tag}) — KL to re-prefill of the full-rank patch, and float32 patch factors",
        latex_text(f"The bf16 reference floor and float32 patch factors ({group}{tag})."),
        f"tab:{group}",
        footer,
        ["\n".join(notes)],
        math=False,
    )


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "bf16_floor", lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
