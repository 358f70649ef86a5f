"""Table 7: the cross-chunk deficit across backbones, isolated by the 4D mask (B at its native positions).

    python -m experiments.table7 experiment=table7        # paper scale (six backbones; paper values beside ours)
    python -m experiments.table7 experiment=table7_tiny   # tiny scale

Each model runs two jobs, told apart by the job's ``canonical_context`` (read off the job config):

- ``native`` (the canonical prefilled at B's native positions, δ = 0, so blind reuse ≡ the oracle):
  loss-KL = KL(re-prefill ‖ 4D-mask oracle), the ``oracle4d`` row's ``kl``; e90/n_B of that Δ per channel
  (V / c_KV: ``e90_nb_content``, the paper's "on V"; K / k_pe: ``e90_nb_rotary``); and gap@m, the median
  over items with a measurable loss-KL (above the job's ``eta_floor``) of 1 − KL(patch_m) / loss-KL
  (Table 7 caption), with its bootstrap CI.
- ``prefix`` (the canonical behind the prefix, relocated by R(δ)): ctrl-KL = KL(oracle ‖ blind), the blind
  row's ``kl_oracle`` (what relocation adds; the paper: "10–320× below the conditioning loss").

KLs and e90/n_B are means over items with 95% cluster-bootstrap CIs; "loss / ctrl" is the ratio of the
means. Paper: arXiv 2606.23581, Table 7 and App. C.4 ("a rank-64 patch closes 85–96% of the per-item
deficit (92–99% at rank-256)").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import cli, require_rows, table_outputs, with_job_columns
from experiments.formats import kl_fmt, partial_tag, row_cell, with_paper
from experiments.panels import selection_note
from experiments.paper import paper_or
from kamera.metrics import eta


def per_item(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per item with a value of ``column`` (the first such row: item-level measures repeat per arm)."""
    return rows.dropna(subset=[column]).drop_duplicates("item_id")


def gaps(native: pd.DataFrame) -> dict[int, pd.DataFrame]:
    """Per patch rank m: per item, gap = 1 − KL(patch_m) / loss-KL (NaN where loss-KL is not above the floor)."""
    loss = native[native["arm_name"] == "oracle4d"].drop_duplicates("item_id").set_index("item_id")["kl"]
    out = {}
    patches = native[(native["arm_name"] == "patch") & native["item_id"].isin(loss.index)]
    for rank, g in patches.groupby("rank"):
        g = g.drop_duplicates("item_id")
        values = [eta(k, loss[i], floor, what=f"gap@{rank:g} of item {i}")
                  for k, i, floor in zip(g["kl"], g["item_id"], g["eta_floor"], strict=True)]
        out[int(rank)] = g.assign(gap=values)
    return out


def model_row(rows: pd.DataFrame, paper: dict) -> dict:
    """One model's cells; a cell measured on fewer items than the model ran (n) says its own n."""
    native = rows[rows["canonical_context"] == "native"]
    prefix = rows[rows["canonical_context"] == "prefix"]
    oracle = per_item(rows[rows["arm_name"] == "oracle4d"], "kl")
    ctrl = per_item(prefix[prefix["arm_name"] == "blind"], "kl_oracle")
    n = rows["item_id"].nunique()

    def counted(text: str, got: pd.DataFrame) -> str:
        return text + (f" (n = {len(got)})" if 0 < len(got) != n else "")

    e90_v, e90_k = per_item(native, "e90_nb_content"), per_item(native, "e90_nb_rotary")
    cell = {"n": with_paper(str(n), paper.get("n"), str),
            "ctrl-KL": with_paper(counted(row_cell(ctrl, "kl_oracle", fmt=kl_fmt), ctrl), paper.get("ctrl"), kl_fmt),
            "loss-KL": with_paper(counted(row_cell(oracle, "kl", fmt=kl_fmt), oracle), paper.get("loss"), kl_fmt)}
    ratio = oracle["kl"].mean() / ctrl["kl_oracle"].mean() if len(ctrl) and len(oracle) else np.nan
    cell["loss / ctrl"] = "–" if not np.isfinite(ratio) else (f"{ratio:,.0f}×" if ratio >= 10 else f"{ratio:.2g}×")
    cell["e90/n_B (V)"] = with_paper(counted(row_cell(e90_v, "e90_nb_content"), e90_v), paper.get("e90"))
    cell["e90/n_B (K)"] = counted(row_cell(e90_k, "e90_nb_rotary"), e90_k)
    for rank, g in gaps(native).items():
        measurable = g.dropna(subset=["gap"])
        cell[f"gap@{rank}"] = with_paper(row_cell(measurable, "gap", stat=np.median) + f" (n = {len(measurable)})",
                                         paper.get(f"gap@{rank}"))
    return cell


def table(rows: pd.DataFrame, paper: dict | None = None) -> pd.DataFrame:
    """One line per model (its family beside it; the paper's values, conf/experiment/table7.yaml ``paper``)."""
    models = paper_or(paper, "table7").get("models", {})
    lines = {f"{model} ({m['attention'].iloc[0]})": model_row(m, models.get(model, {}))
             for model, m in rows.groupby("model", sort=True)}
    frame = pd.DataFrame(lines).T
    gap_cols = sorted((c for c in frame.columns if c.startswith("gap@")), key=lambda c: int(c[4:]))
    frame = frame[[c for c in frame.columns if not c.startswith("gap@")] + gap_cols].fillna("–")
    frame.index.name = "model (family)"
    return frame


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None,
           selection: str = "") -> tuple[str, list[Path]]:
    """``rows`` need the job columns ``canonical_context`` and ``eta_floor`` (see :func:`main`); ``selection``:
    which items count (:func:`experiments.panels.selection_note`), printed under the table."""
    require_rows(rows, group)
    paper, tag = paper_or(paper, "table7"), partial_tag(footer)
    return table_outputs(
        table(rows, paper),
        stem,
        f"Table 7 ({group}{tag}) — the deficit by 4D-mask isolation: mean [95% "
        "cluster-bootstrap CI]; gap@m = median over items with a measurable loss-KL",
        f"Cross-chunk conditioning deficit per backbone, 4D-mask isolation ({group}{tag}); means "
        "(gap@m: medians) with 95% cluster-bootstrap CIs.",
        f"tab:{group}",
        footer,
        [paper["note"]],
    )


def main(argv: list[str] | None = None) -> None:
    def draw(exp):
        rows = with_job_columns(
            exp, exp.rows, {"canonical_context": lambda c: c.canonical_context, "eta_floor": lambda c: c.eta_floor}
        )
        return render(rows, exp.name, exp.stem("table"), exp.footer, exp.paper, selection_note(exp))

    cli(__doc__, "table7", draw, argv)


if __name__ == "__main__":
    main()
