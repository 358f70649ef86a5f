"""Table 1: eviction is asymmetric. Recall at full turnover (the stale, the stored and the exact rank-32 patch)
and the survivor of a slide (keep-as-is vs a rank-64 removal patch), per model.

    python -m experiments.table1 experiment=table1        # Qwen2.5-VL, Qwen3-VL, Kimi-VL on Video-MME segments
    python -m experiments.table1 experiment=table1_tiny   # the toy window model and tiny families

Reads the ``recall`` and ``survivor`` window rows of exactly the experiment's jobs; writes
<paths.tables>/<experiment>.md and .tex. Columns (:func:`experiments.windows.table1`), per recall variant at
τ = 1 (stale: frozen at eviction; stored: the eviction-time patch kept position-free and relocated at the
recall; exact: re-formed at the recall, the paper's fresh patch; ``kamera/window/probes/recall.py``): η (mean
[95% cluster-bootstrap CI: questions on one video resampled together], median, measurable n), the mean KL, the
forwards run at the recall, and the flip-recover over the flips (items where blind reuse changes the re-prefill
decision);
the survivor's keep-as-is KL (mean, and its ratio to blind reuse's), the removal patch's η, and the removal
deficit's structure (:func:`removal_structure`: Δ_remove's relative norm, shallow half → deep half of the
layers, and its 90%-energy rank over the layer-channels above rounding; §5 "deep rel-norm ≈ 3× shallow;
90%-energy rank 36–44"). The paper reports the removal patch's η without
saying against which floor; we read it as against keep-as-is (``eta_keep`` = 1 − KL/KL_keep: the share
of the keep-as-is gap the removal patch closes) and also give η against blind.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from experiments.common import cli, table_outputs
from experiments.formats import partial_tag
from experiments.paper import paper_or
from experiments.windows import (
    RECALL,
    eta_cell,
    mean,
    mean_of,
    median,
    models,
    num,
    paper,
    ratio,
    records,
    select,
    table1,
)

COLUMNS = ["arch", "n", "stale η (τ = 1)", "stored η (τ = 1)", "exact η (τ = 1)", "KL stale / stored / exact",
           "forwards at the recall stale / stored / exact", "flips", "flip-recover stale / stored / exact",
           "n (survivor)", "keep-as-is KL", "keep / blind KL", "removal η vs keep-as-is", "removal η vs blind",
           "Δ_remove rel-norm shallow → deep", "Δ_remove e90"]


def removal_structure(rec: dict) -> dict:
    """One removal-patch row's Δ_remove structure (its ``removal_rel_norm`` / ``removal_e90`` JSON, [layer][channel]):
    the relative norm averaged over the channels of the shallow half of the layers (l < L/2) and of the deep half,
    and the median e90 over the layer-channels above rounding (the probe reports e90 = 0 for a layer-channel
    whose Δ_remove is rounding, :func:`kamera.metrics.rounding_floor`; those are left out, as ``e90_columns``
    leaves them out of Δ's e90)."""
    rel, e90 = json.loads(rec["removal_rel_norm"]), json.loads(rec["removal_e90"])
    per_layer = [sum(chans) / len(chans) for chans in rel]
    half = len(per_layer) // 2
    above = [e for chans in e90 for e in chans if e > 0]
    return {"rel_shallow": mean(per_layer[:half]) if half else math.nan, "rel_deep": mean(per_layer[half:]),
            "e90_above": median(above)}


def structure_cells(removal: list[dict], p: dict) -> list[str]:
    """Table 1's removal-deficit columns: the mean shallow → deep relative norm (and the ratio of the means; the
    paper: "deep rel-norm ≈ 3× shallow") and the e90 (mean [95% cluster-bootstrap CI] over items of each item's
    median; the paper: "90%-energy rank 36–44")."""
    got = [{**r, **removal_structure(r)} for r in removal if isinstance(r.get("removal_rel_norm"), str)]
    if not got:
        return ["–", "–"]
    shallow, deep = mean_of(got, "rel_shallow"), mean_of(got, "rel_deep")
    depth = f"{num(shallow, 3)} → {num(deep, 3)} ({num(ratio(deep, shallow), 1)}×)"
    if "depth" in p:
        depth += f" (paper ≈ {p['depth']:g}×)"
    return [depth, eta_cell(got, "e90_above") + (f" (paper {p['e90']})" if "e90" in p else "")]


def frame(rows: pd.DataFrame, values: dict | None = None) -> pd.DataFrame:
    """One line per model (every model with recall or survivor rows); the paper's values (conf/experiment/
    table1.yaml ``paper``) beside the paper models'."""
    paper_models = paper_or(values, "table1").get("models", {})
    structure = paper_or(values, "table1").get("removal_structure", {})  # one statement for the paper's models
    recs = records(rows)
    out = {}
    for model, a in models(recs):
        t, p = table1(recs, model), paper_models.get(model, {})
        eta = {name: eta_cell(select(recs, model=model, probe="recall", tau=1.0, variant=variant))
               for name, variant in RECALL.items()}
        removal = select(recs, model=model, probe="survivor", variant="removal_patch")
        flip = " / ".join(num(t.flip_recovers[name]) for name in RECALL)
        if "flip" in p:
            flip += f" (paper stale {p['flip'][0]:.2f}, fresh {p['flip'][1]:.2f})"
        out[model] = [
            a, t.n_recall, eta["stale"] + paper(p.get("stale")), eta["stored"], eta["exact"] + paper(p.get("fresh")),
            " / ".join(num(t.recall_kl[name], 3) for name in RECALL),
            " / ".join(num(t.recall_forwards[name]) for name in RECALL),
            t.n_flips, flip, t.n_survivor, num(t.keep_kl, 3) + paper(p.get("keep_kl"), 3), num(t.keep_kl_over_blind),
            eta_cell(removal, "eta_keep") + paper(p.get("removal")), eta_cell(removal),
            *structure_cells(removal, structure if model in paper_models else {}),
        ]
    table = pd.DataFrame.from_dict(out, orient="index", columns=COLUMNS)
    table.index.name = "model"
    return table


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None) -> tuple[str, list[Path]]:
    paper = paper_or(paper, "table1")
    table = frame(rows, paper)
    if table.empty:
        raise SystemExit(f"{group} has no recall or survivor window rows")
    notes = [
        "Recall: the chunk re-admitted after the whole window turned over (τ = 1); stale = the patch frozen at "
        "eviction, relocated and replayed; stored = the same eviction-time patch as the store keeps it (in the "
        "canonical's frame, beside KV(x|∅)), relocated by R(δ) at the recall and replayed: formed before the recall "
        "exists, it pays nothing there; exact = the rank-32 patch re-formed on the window the chunk is recalled behind "
        "(the paper's fresh patch), paying its conditioned forward at the recall. KL to the recall window's "
        "re-prefill (mean over items); forwards at the recall as run (mean per item). Survivor: the leading "
        "chunk evicted, the interior survivor kept as-is (R(δ) only) or with a rank-64 removal patch. η = 1 − "
        "KL/KL_blind, mean [95% cluster-bootstrap CI: questions on one video resampled together] over items with "
        "a measurable deficit (KL_blind > eta_floor); flip-recover over the items where blind reuse flips the "
        "re-prefill decision."
    ]
    if rows["model"].isin(list(paper.get("models", {}))).any():
        notes.append(paper["note"])
    return table_outputs(
        table,
        stem,
        f"Table 1 ({group}) — eviction is asymmetric{partial_tag(footer)}",
        f"Recall needs a fresh patch, survivors need only R($\\delta$) ({group}).",
        f"tab:{group}",
        footer,
        ["\n".join(notes)],
        math=False,
    )


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "table1", lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
