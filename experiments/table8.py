"""Table 8: the repair frontier per model: the patch's η, the re-prefill fraction that matches it, token η at p = 0.5.

    python -m experiments.table8 experiment=table8        # paper scale (six models, n = 40; paper values beside ours)
    python -m experiments.table8 experiment=table8_tiny   # tiny scale

Per model (η = 1 − KL_arm / KL_blind over the items whose blind reuse measurably loses):

- patch η@m: the mean η of the rank-m patch, with its 95% cluster-bootstrap CI (one column pair per rank);
- re-prefill to match: the fraction of B's layers a partial forward *computes* when it first reaches that η
  (Table 8 caption: "the re-run fraction at which a partial forward first reaches the patch's η"). The
  shallow arms' mean η is taken at their computed fraction (``computed_fraction``: the (row, layer) cells
  they ran over n_B · L; knobs that give one layer count pool), with η = 0 at 0 (blind reuse) and η = 1 at
  1 (re-prefill) as the ends, and interpolated linearly between sweep points; "–" without shallow rows.
  Its CI resamples items (clusters) and recomputes curve and crossing. Why computed, not (L − ℓ)/L: resuming
  at ℓ re-runs layer ℓ − 1 for B's rows (the lead-in that gives layer ℓ its context), so ℓ reused layers
  compute (L − ℓ + 1)/L of the stack, and ℓ = 1 already is re-prefill; on the (L − ℓ)/L axis the sweep topped
  out at (L − 1)/L and a method that needs every layer printed (L − 1)/L (0.75 on a 4-layer model) by
  construction;
- token η@0.5: the mean η of oracle top-p token recompute at p = 0.5.

The sweep itself (η vs re-run fraction, the patch's η dashed) is the companion figure
<paths.figures>/<experiment>_sweep.{pdf,png}. Paper: arXiv 2606.23581, Table 8 (n = 40 per model).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, cli, require_rows, save_figure, suffixed, table_outputs
from experiments.formats import cluster_labels, params, partial_tag, row_cell, with_paper
from experiments.paper import paper_or
from kamera.metrics import bootstrap_ci

TOLERANCE = 1e-6  # η differences below this are float rounding


def measured(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with a defined η (the item's blind reuse measurably loses)."""
    return rows.dropna(subset=["eta"])


def sweep_matrix(m: pd.DataFrame) -> tuple[list[str], np.ndarray, list[float]]:
    """Items × sweep points η (NaN where an item lacks a point): the shallow arms pooled by the fraction of
    layers they computed, between the ends η = 0 at 0 (blind reuse) and η = 1 at 1 (re-prefill), which hold by
    definition wherever a sweep point does not measure them; returns (items, matrix, fractions). No
    shallow rows: no sweep (empty)."""
    shallow = m[m["arm_name"] == "shallow_reprefill"]
    if shallow.empty:
        return [], np.empty((0, 0)), []
    x = pd.Series([q["computed_fraction"] for q in params(shallow)], index=shallow.index, dtype=float)
    table = shallow.assign(x=x).pivot_table(index="item_id", columns="x", values="eta", aggfunc="mean")
    for end, value in ((0.0, 0.0), (1.0, 1.0)):
        if end not in table.columns:
            table[end] = value
    table = table[sorted(table.columns)]
    return list(table.index), table.to_numpy(dtype=float), [float(c) for c in table.columns]


def crossing(curve: np.ndarray, xs: list[float], target: float) -> float:
    """The first x at which ``curve`` (η at ``xs``, ascending) reaches ``target``, linearly interpolated; inf if
    never. "Reaches" allows :data:`TOLERANCE` (η's that equal to float rounding, as a full-rank patch and a
    full re-prefill do, are a match, not a miss)."""
    for i, (x, y) in enumerate(zip(xs, curve, strict=True)):
        if y >= target - TOLERANCE:
            if i == 0:
                return x
            x0, y0 = xs[i - 1], curve[i - 1]
            return min(x, x0 + (x - x0) * (target - y0) / (y - y0))
    return np.inf


def frontier(m: pd.DataFrame, rank: float) -> tuple[float, float, float]:
    """(fraction, low, high): the computed fraction of layers matching the rank-m patch's mean η,
    with its item bootstrap."""
    items, matrix, xs = sweep_matrix(m)
    patch = m[(m["arm_name"] == "patch") & (m["rank"] == rank)].drop_duplicates("item_id").set_index("item_id")["eta"]
    keep = [i for i, item in enumerate(items) if item in patch.index]
    if not keep or not xs:
        return (np.nan, np.nan, np.nan)
    matrix, target = matrix[keep], patch.loc[[items[i] for i in keep]].to_numpy()

    def stat(idx: np.ndarray) -> float:
        idx = idx.astype(int)
        return crossing(np.nanmean(matrix[idx], axis=0), xs, float(target[idx].mean()))

    return bootstrap_ci(np.arange(len(keep)), stat, clusters=item_clusters(m, [items[i] for i in keep]))


def item_clusters(m: pd.DataFrame, items: list[str]) -> list[str]:
    """The bootstrap cluster of each of ``items`` (:func:`experiments.common.cluster_labels` of its rows in ``m``)."""
    keys = m.drop_duplicates("item_id").set_index("item_id").reindex(items)["cluster_key"].tolist()
    return cluster_labels(pd.DataFrame({"item_id": items, "cluster_key": keys}))


def fraction_cell(ci: tuple[float, float, float]) -> str:
    def fmt(v: float) -> str:
        return "never" if np.isinf(v) else f"{v:.2f}"

    return "–" if np.isnan(ci[0]) else f"{fmt(ci[0])} [{fmt(ci[1])}, {fmt(ci[2])}]"


def n_layers(m: pd.DataFrame) -> str:
    """L from a shallow row: ℓ reused layers at effective re-run fraction f < 1 give L = ℓ / (1 − f)."""
    for q in params(m[m["arm_name"] == "shallow_reprefill"]):
        if q["rerun_fraction_effective"] < 1:
            return str(round(q["reused_layers"] / (1 - q["rerun_fraction_effective"])))
    return "?"


def table(rows: pd.DataFrame, paper: dict | None = None) -> pd.DataFrame:
    """One line per model; the paper's values (conf/experiment/table8.yaml ``paper``) beside the rank it states."""
    values = paper_or(paper, "table8")
    lines = {}
    for model, m in rows.groupby("model", sort=True):
        m, paper = measured(m), values.get("models", {}).get(model, {})
        line = {
            "family (n_L)": f"{m['attention'].iloc[0] if len(m) else '?'} ({n_layers(m)})",
            "n": str(m["item_id"].nunique()),
        }
        for rank in sorted(m.loc[m["arm_name"] == "patch", "rank"].dropna().unique()):
            at = paper if rank == values.get("rank") else {}
            line[f"patch η@{rank:g}"] = with_paper(
                row_cell(m[(m["arm_name"] == "patch") & (m["rank"] == rank)], "eta"), at.get("patch")
            )
            line[f"re-prefill to match r{rank:g}"] = with_paper(fraction_cell(frontier(m, rank)), at.get("match"))
        topp = m[m["arm_name"] == "oracle_topp"]
        topp = topp[[q.get("p") == 0.5 for q in params(topp)]]
        line["token η@0.5"] = with_paper(row_cell(topp, "eta"), paper.get("token")) if len(topp) else "–"
        lines[model] = line
    frame = pd.DataFrame(lines).T.fillna("–")
    frame.index.name = "model"
    return frame


def sweep_band(m: pd.DataFrame) -> tuple[list[float], list[tuple[float, float, float]]]:
    """One model's sweep: the re-run fractions and, at each, mean η with its 95% cluster-bootstrap CI."""
    items, matrix, xs = sweep_matrix(m)
    clusters = item_clusters(m, items)
    return xs, [bootstrap_ci(matrix[:, j], clusters=clusters) for j in range(len(xs))]


def plot(rows: pd.DataFrame, title: str) -> plt.Figure:
    """η vs computed fraction of layers per model (mean, 95% cluster-bootstrap band), the rank-m patch's mean η
    dashed."""
    with plt.style.context(str(STYLE)):
        fig, ax = plt.subplots()
        for i, (model, m) in enumerate(measured(rows).groupby("model", sort=True)):
            xs, cis = sweep_band(m)
            if not xs:
                continue
            colour = f"C{i}"
            ax.plot(xs, [c[0] for c in cis], marker="o", color=colour, label=model)
            ax.fill_between(xs, [c[1] for c in cis], [c[2] for c in cis], color=colour, alpha=0.15, linewidth=0)
            for rank in sorted(m.loc[m["arm_name"] == "patch", "rank"].dropna().unique()):
                level = m[(m["arm_name"] == "patch") & (m["rank"] == rank)]["eta"].mean()
                ax.axhline(level, color=colour, linestyle="--", linewidth=0.8)
        ax.set_xlabel("fraction of B's layers computed (shallow re-prefill, lead-in layer included)")
        ax.set_ylabel("η (share of the blind gap closed)")
        ax.set_title(title + " (dashed: patch η)")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def render(
    rows: pd.DataFrame, group: str, stem: Path, figure_stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    require_rows(rows, group)
    paper, tag = paper_or(paper, "table8"), partial_tag(footer)
    md, paths = table_outputs(
        table(rows, paper),
        stem,
        f"Table 8 ({group}{tag}) — the repair frontier: mean η [95% "
        "cluster-bootstrap CI]; re-prefill to match = fraction of B's layers computed (lead-in "
        f"layer included) where shallow re-prefill first reaches the patch's η (sweep: {figure_stem.name}.pdf)",
        f"The repair frontier ({group}{tag}); mean η and 95% cluster-bootstrap CIs.",
        f"tab:{group}",
        footer,
        [paper["note"]],
    )
    return md, [*paths, *save_figure(plot(rows, f"Table 8 sweep ({group}{tag})"), figure_stem, footer)]


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "table8",
        lambda exp: render(
            exp.rows, exp.name, exp.stem("table"), suffixed(exp.stem("figure"), "_sweep"), exp.footer, exp.paper
        ),
        argv,
    )


if __name__ == "__main__":
    main()
