"""§5 "Reorder": one orbit patch for every ordering of a cached set, per backbone and set size K.

    python -m experiments.reorder experiment=reorder        # Qwen2.5-VL, Qwen3-VL, Kimi-VL, DeepSeek-VL on Video-MME
    python -m experiments.reorder experiment=reorder_tiny   # make reorder

Reads the ``reorder`` window rows of exactly the experiment's jobs (:mod:`kamera.window.probes.reorder`: per item
and test ordering π of the K chunks in front of the cached chunk, the stored identity-order patch ``transfer``,
π's own ``exact`` patch and the ``orbit`` patch averaged over the other orderings, π held out); writes
<paths.tables>/<experiment>.md and .tex: one line per (model, K) with the number of orderings (exhaustive or
sampled), η of each patch (mean [95% cluster-bootstrap CI], median, n: the rows of one item, one per test
ordering, and the questions on one video resampled together), η_orbit − η_exact, and the deficit's order
dependence ‖Δπ − Δid‖/‖Δid‖ (``delta_rel``, mean over test orderings). The paper's values (per backbone
η_orbit ≈ η_exact, the orbit's η by K on GQA and MLA, "0.43–0.53") beside ours.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.common import cli, table_outputs
from experiments.formats import partial_tag
from experiments.paper import paper_or
from experiments.windows import eta_cell, mean, mean_of, models, num, paper, records, select

VARIANTS = ("transfer", "exact", "orbit")
COLUMNS = ["orderings", "η transfer (stored identity patch)", "η exact (π's own)", "η orbit (π held out)",
           "η orbit − exact", "‖Δπ − Δid‖/‖Δid‖"]


def frame(rows: pd.DataFrame, values: dict | None = None) -> pd.DataFrame:
    """One line per (model, K); the paper's values (conf/experiment/reorder.yaml ``paper``) beside the paper
    models' (per backbone at K = 3, the orbit's η by K where it gives one)."""
    values = paper_or(values, "reorder")
    stated = values.get("models", {})
    recs = [r for r in records(rows) if r["probe"] == "reorder"]
    out = {}
    for model, a in models(recs):
        p = stated.get(model, {})
        for k in sorted({int(r["n_chunks"]) for r in select(recs, model=model)}):
            got = {v: select(recs, model=model, n_chunks=k, variant=v) for v in VARIANTS}
            if not any(got.values()):
                continue
            first = next(r for g in got.values() for r in g)
            sampled = "exhaustive" if first["exhaustive"] else "sampled"
            by_k = p.get("orbit_by_k", {}).get(k)
            orbit_paper = by_k if by_k is not None else (p.get("orbit") if k == 3 else None)
            diff = mean(r["eta"] for r in got["orbit"]) - mean(r["eta"] for r in got["exact"])
            dist = num(mean_of(got["orbit"] or got["exact"], "delta_rel"))
            out[(f"{model} ({a})", k)] = [
                f"{int(first['n_orderings'])} ({sampled})", eta_cell(got["transfer"]),
                eta_cell(got["exact"]) + paper(p.get("exact") if k == 3 else None),
                eta_cell(got["orbit"]) + paper(orbit_paper), num(diff),
                dist + (f" (paper {values['delta_rel']})" if p else ""),
            ]
    table = pd.DataFrame.from_dict(out, orient="index", columns=COLUMNS)
    table.index = pd.MultiIndex.from_tuples(table.index, names=["model", "K"]) if len(table) else table.index
    return table


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None) -> tuple[str, list[Path]]:
    values = paper_or(paper, "reorder")
    table = frame(rows, values)
    if table.empty:
        raise SystemExit(f"{group} has no reorder window rows")
    patched = rows[(rows.get("probe") == "reorder") & (rows.get("variant") == "exact")]["rank"]
    ranks = " / ".join(dict.fromkeys("full" if pd.isna(r) else str(int(r)) for r in patched)) or "–"
    notes = [
        "Per test ordering π of the K chunks in front of the cached chunk (every non-identity ordering of the "
        "orbit): transfer = the identity-order patch formed once and stored; exact = π's own patch (one "
        "conditioned forward at the reorder); orbit = one patch averaged over the orbit's other orderings (π held "
        f"out), stored. Rank {ranks}. η = 1 − KL/KL_blind, mean [95% cluster-bootstrap CI] over the rows (an item's "
        "orderings and the questions on one video resampled together) with a measurable deficit; "
        "‖Δπ − Δid‖/‖Δid‖: the raw deficit's change under the reorder, over all layers and channels."
    ]
    if any(m.split(" (", 1)[0] in values.get("models", {}) for m in table.index.get_level_values(0)):
        notes.append(values["note"])
    return table_outputs(
        table,
        stem,
        f"Reorder ({group}) — one orbit patch for every ordering{partial_tag(footer)}",
        f"Reorder: transfer, exact and orbit patches per set size K ({group}).",
        f"tab:{group}",
        footer,
        ["\n".join(notes)],
        math=False,
    )


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "reorder", lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
