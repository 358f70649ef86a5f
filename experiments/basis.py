"""App. C.2 / §4: a fixed per-layer basis pooled over items recovers a held-out deficit as well as its own SVD.

    python -m experiments.basis experiment=basis        # Qwen2.5-VL, Kimi-VL on MuirBench (Fig. 5's workload)
    python -m experiments.basis experiment=basis_tiny   # make basis

Reads the ``deficit_basis`` probe records (:mod:`kamera.probes.deficit_basis`: per item and layer-channel Δ's
top-k σ and right singular vectors). Per model the items' clusters are split in two by a seeded permutation;
on the training half the Gram G = Σ_items V_k diag(s_k²) V_kᵀ is formed per layer-channel and its top-r
eigenvectors W_r are the pooled basis; for each held-out item the share of ‖Δ‖² (summed over layer-channels)
kept by Δ W_r W_rᵀ is set against the share its own rank-r SVD keeps (Eckart–Young: the best any rank-r
basis can do for that item). Both are read from the stored top-k directions, so the pooled share is a lower
bound where k is below Δ's rank. ``chance``: a random rank-r basis's expected share, r / width. Writes
<paths.tables>/<experiment>.md and .tex: one line per (model, r), shares as means [95% bootstrap CI over the
held-out items].

Across content / task (§4's "transfers across content / task"): where a model's records span several tasks
(benchmark · subset), the basis is fit on every item of one task and scored on every item of another, one line per
ordered pair at the largest rank (``model · fit → held``).
"""

from __future__ import annotations

import json
from itertools import permutations
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import ci_cell, cli, latex_text, paper_or, partial_tag, table_outputs
from experiments.panels import of_probe, one_label

RANKS = (1, 2, 4, 8, 16)
SEED = 0


def split(items: pd.DataFrame, seed: int = SEED) -> tuple[set, set]:
    """(training items, held-out items): the clusters (``cluster_key``, else the item) in a seeded permutation,
    the first half training."""
    keys = items.get("cluster_key")
    cluster = {i: (k if isinstance(k, str) and k else f"item:{i}")
               for i, k in zip(items["item_id"], keys if keys is not None else [None] * len(items), strict=True)}
    clusters = sorted(set(cluster.values()))
    order = np.random.default_rng(seed).permutation(len(clusters))
    train = {clusters[j] for j in order[: len(clusters) // 2]}
    return {i for i, c in cluster.items() if c in train}, {i for i, c in cluster.items() if c not in train}


def _directions(rec) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(json.loads(rec["s"]), dtype=np.float64), np.asarray(json.loads(rec["v"]), dtype=np.float64)


def pooled_bases(train: pd.DataFrame, r_max: int) -> dict[tuple[int, str], np.ndarray]:
    """Per (layer, channel): the top-``r_max`` eigenvectors of Σ_train V_kᵀ diag(s_k²) V_k, as columns."""
    out = {}
    for (layer, channel), g in train.groupby(["layer", "channel"]):
        width = int(g["width"].iloc[0])
        gram = np.zeros((width, width))
        for _, rec in g.iterrows():
            s, v = _directions(rec)
            gram += (v.T * s**2) @ v
        _, vecs = np.linalg.eigh(gram)
        out[(int(layer), channel)] = vecs[:, ::-1][:, :r_max]
    return out


def shares(held: pd.DataFrame, bases: dict, ranks: list[int]) -> pd.DataFrame:
    """Per held-out item and rank r: the share of Σ ‖Δ‖² its own rank-r SVD, the pooled basis and chance keep."""
    rows = []
    for item, g in held.groupby("item_id", sort=True):
        total = float(g["energy"].sum())
        if total <= 0:
            continue
        for r in ranks:
            own = pooled = chance = 0.0
            for _, rec in g.iterrows():
                s, v = _directions(rec)
                w = bases[(int(rec["layer"]), rec["channel"])][:, :r]
                own += float((s[:r] ** 2).sum())
                pooled += float((s**2 * ((v @ w) ** 2).sum(axis=1)).sum())
                chance += float(rec["energy"]) * min(r, int(rec["width"])) / int(rec["width"])
            rows.append({"item_id": item, "r": r, "own": own / total, "pooled": pooled / total,
                         "chance": chance / total})
    return pd.DataFrame(rows)


def frame(records: pd.DataFrame, values: dict | None = None) -> pd.DataFrame:
    """One line per (model, r): held-out items, the own-SVD / pooled-basis / chance shares and pooled over own."""
    values = paper_or(values, "basis")
    out = {}
    for model, m in records.groupby("model", sort=True):
        train, held = split(m.drop_duplicates("item_id"))
        if not train or not held:
            continue
        k = int(m["k"].min())
        ranks = [r for r in RANKS if r <= k]
        bases = pooled_bases(m[m["item_id"].isin(train)], max(ranks))
        got = shares(m[m["item_id"].isin(held)], bases, ranks)
        for r in ranks:
            g = got[got["r"] == r]
            ratio = (g["pooled"] / g["own"]).tolist()
            out[(model, r)] = [f"{len(train)} / {len(g)}", ci_cell(g["own"].tolist()), ci_cell(g["pooled"].tolist()),
                               ci_cell(ratio) + (f" (paper {values['ratio']})" if model in values.get("models", [])
                                                 else ""), f"{g['chance'].mean():.2f}"]
        out.update(across_tasks(m, max(ranks)))
    columns = ["items fit / held out", "own SVD keeps", "pooled basis keeps", "pooled / own", "chance (r / width)"]
    table = pd.DataFrame.from_dict(out, orient="index", columns=columns)
    table.index = pd.MultiIndex.from_tuples(table.index, names=["model", "r"]) if len(table) else table.index
    return table


def across_tasks(m: pd.DataFrame, r: int) -> dict[tuple[str, int], list[str]]:
    """One model's transfer lines: per ordered pair of its tasks (bench · subset), the basis fit on every item of the
    first and scored on every item of the second, at rank ``r``; none where the model ran one task."""
    task = m["bench"].astype(str) + " · " + m["subset"].astype(str)
    out = {}
    for fit, held in permutations(sorted(task.unique()), 2):
        got = shares(m[task == held], pooled_bases(m[task == fit], r), [r])
        if got.empty:
            continue
        out[(f"{m['model'].iloc[0]} · {fit} → {held}", r)] = [
            f"{m.loc[task == fit, 'item_id'].nunique()} / {len(got)}", ci_cell(got["own"].tolist()),
            ci_cell(got["pooled"].tolist()), ci_cell((got["pooled"] / got["own"]).tolist()),
            f"{got['chance'].mean():.2f}"]
    return out


def render(probes: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None) -> tuple[str, list[Path]]:
    values, tag = paper_or(paper, "basis"), partial_tag(footer)
    records = one_label(of_probe(probes, "deficit_basis"), "deficit_basis")
    if records.empty:
        raise SystemExit(f"{group} has no deficit_basis records (probes=[deficit_basis])")
    table = frame(records, values)
    if table.empty:
        raise SystemExit(f"{group}: no model has two clusters of deficit_basis records to fit on and hold out")
    notes = ["Share of a held-out item's ‖Δ‖² (all layer-channels) that a rank-r basis keeps: the item's own top-r "
             "SVD (the best any rank-r basis can do for it) and a per-layer-channel basis pooled over the training "
             "half's items (top-r eigenvectors of Σ V diag(s²) Vᵀ); clusters split by a seeded permutation; mean "
             "[95% bootstrap CI] over held-out items. Chance: a random rank-r basis (r / width). Lines "
             "``model · fit → held``: the basis fit on every item of one task (benchmark · subset) and scored on "
             "every item of another, at the largest rank (transfer across content / task)."]
    if any(m in values.get("models", []) for m in table.index.get_level_values(0)):
        notes.append(values["note"])
    return table_outputs(table, stem, f"Shared basis ({group}{tag}) — a pooled basis against each item's own SVD",
                         latex_text(f"A pooled per-layer basis against the held-out item's own SVD ({group}{tag})."),
                         f"tab:{group}", footer, ["\n".join(notes)], math=False)


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "basis", lambda exp: render(exp.probes, exp.name, exp.stem("table"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
