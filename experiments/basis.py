"""App. C.2 / §4: a fixed per-layer basis pooled over items recovers a held-out deficit as well as its own SVD.

    make basis [SCALE=paper]                            # both passes below, then this table
    python -m experiments.basis experiment=basis        # Qwen2.5-VL, Kimi-VL on MuirBench and MMLongBench-Doc
    python -m experiments.basis experiment=basis_tiny basis_pass=eta
    python -m experiments.basis --fit experiment=basis_tiny   # the pooled bases the eta pass reads (make basis-fit)

Reads the ``deficit_basis`` probe records (:mod:`kamera.probes.deficit_basis`: per item and layer-channel Δ's
top-k σ and right singular vectors). Per model the items' clusters are split in two by a seeded permutation;
on the training half the Gram G = Σ_items V_k diag(s_k²) V_kᵀ is formed per layer-channel and its top-r
eigenvectors W_r are the pooled basis; for each held-out item the share of ‖Δ‖² (summed over layer-channels)
kept by Δ W_r W_rᵀ is set against the share its own rank-r SVD keeps (Eckart–Young: the best any rank-r
basis can do for that item). Both are read from the stored top-k directions, so the pooled share is a lower
bound where k is below Δ's rank. ``chance``: a random rank-r basis's expected share, r / width. Writes
<paths.tables>/<experiment>.md and .tex: one line per (model, r), shares as means [95% bootstrap CI over the
held-out items].

Frames: the probe records the rotary channel (K, MLA k_pe) twice, as cached (``native``: each token's row
rotated to its position) and ``unrotated`` (R(−p) per token, the keys before RoPE, where a direction is the same
whatever position an item's B sits at); a content channel is the same in both. The energy shares above are read in
:data:`FRAME`; the columns ``K pooled / own`` give the rotary channel's alone in each frame.

The η of a basis patch (``basis_pass=eta``, :mod:`kamera.probes.deficit_basis_patch`): ``--fit`` writes each
model's pooled bases (fit on the training half, both frames) to the job's ``basis_fit`` path; the second pass
applies Δ W_r W_rᵀ to each item (coefficients from the item) and runs the query. Columns ``η …``: mean [95% CI]
over the held-out items with a measurable deficit (KL_blind > eta_floor) of the own rank-r SVD patch and the
basis patch in each frame; blind reuse's η is 0 by definition (its median KL is printed beside them).

Placement (``item_offset``): the synthetic and toy benchmarks put B at one position in every item, where the two
frames agree by construction; a job with ``item_offset`` set places its i-th item at i · item_offset, and its
lines are named ``model · item i at i·<step>`` (their own fit, :func:`placement`), beside the model's lines at one
position.

Across content / task (§4's "transfers across content / task"): where a model's records span several tasks
(benchmark · subset), the basis is fit on every item of one task and scored on every item of another, one line per
ordered pair at the largest rank (``model · fit → held``).
"""

from __future__ import annotations

import json
import sys
from itertools import permutations
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.common import Experiment, cli, load, table_outputs, with_job_columns
from experiments.formats import ci_cell, latex_text, partial_tag
from experiments.panels import of_probe, one_label
from experiments.paper import paper_or
from kamera.metrics import ETA_FLOOR, eta

RANKS = (1, 2, 4, 8, 16)
SEED = 0
FRAMES = ("native", "unrotated")
FRAME = "unrotated"  # the keys' frame of the energy columns (docs/metrics.md: the native one fails across positions)


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


def in_frame(records: pd.DataFrame, frame: str, rotary_only: bool = False) -> pd.DataFrame:
    """The records that make up Δ in ``frame``: every content channel's and the rotary channel's in that frame
    (``rotary_only``: the rotary channel's alone)."""
    rotary = records["rotary"].astype(bool)
    return records[rotary & (records["key_frame"] == frame) | (~rotary & (not rotary_only))]


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


def frame(records: pd.DataFrame, values: dict | None = None, patch: pd.DataFrame | None = None,
          floor: float = ETA_FLOOR) -> pd.DataFrame:
    """One line per (model, r): :func:`energy_cells` on the held-out items against the basis fit on the others, and
    (``patch``: the deficit_basis_patch records) the η of the own rank-r patch and of the basis patch in each frame
    with blind reuse's median KL; then the model's transfer lines (:func:`across_tasks`, no η)."""
    values = paper_or(values, "basis")
    out, no_eta = {}, ["–"] * (2 + len(FRAMES))
    for model, m in records.groupby("model", sort=True):
        train, held = split(m.drop_duplicates("item_id"))
        if not train or not held:
            continue
        ranks = [r for r in RANKS if r <= int(m["k"].min())]
        etas = patch_etas(patch[(patch["model"] == model) & patch["item_id"].isin(held)]
                          if patch is not None and len(patch) else None, floor)
        for r, cells in energy_cells(m[m["item_id"].isin(train)], m[m["item_id"].isin(held)], ranks).items():
            if model in values.get("models", []):
                cells[3] += f" (paper {values['ratio']})"
            out[(model, r)] = [*cells, *etas.get(r, no_eta)]
        out.update({key: [*cells, *no_eta] for key, cells in across_tasks(m, max(ranks)).items()})
    columns = ["items fit / held out", "own SVD keeps", "pooled basis keeps", "pooled / own",
               *(f"K pooled / own ({f})" for f in FRAMES), "chance (r / width)", "KL blind (median)", "η own SVD",
               *(f"η basis ({f})" for f in FRAMES)]
    table = pd.DataFrame.from_dict(out, orient="index", columns=columns)
    table.index = pd.MultiIndex.from_tuples(table.index, names=["model", "r"]) if len(table) else table.index
    return table


def energy_cells(fit: pd.DataFrame, held: pd.DataFrame, ranks: list[int]) -> dict[int, list[str]]:
    """Per rank r, a basis fit on ``fit``'s records and scored on ``held``'s: items fit / held out, the own-SVD and
    pooled-basis shares of Δ (keys in :data:`FRAME`) and pooled over own, the rotary channel's pooled over own in
    each frame, and chance."""
    got = shares(in_frame(held, FRAME), pooled_bases(in_frame(fit, FRAME), max(ranks)), ranks)
    rotary = {f: shares(in_frame(held, f, True), pooled_bases(in_frame(fit, f, True), max(ranks)), ranks)
              for f in FRAMES}
    out = {}
    for r in ranks:
        g = got[got["r"] == r]
        if g.empty:
            continue
        out[r] = [
            f"{fit['item_id'].nunique()} / {len(g)}",
            ci_cell(g["own"].tolist()),
            ci_cell(g["pooled"].tolist()),
            ci_cell((g["pooled"] / g["own"]).tolist()),
            *(ci_cell((q["pooled"] / q["own"]).tolist()) for q in (rotary[f][rotary[f]["r"] == r] for f in FRAMES)),
            f"{g['chance'].mean():.2f}",
        ]
    return out


def patch_etas(patch: pd.DataFrame | None, floor: float) -> dict[int, list[str]]:
    """Per rank r of one model's held-out deficit_basis_patch records: blind reuse's median KL, and the mean
    [95% CI] η of the own rank-r patch and of the basis patch in each frame, over the items with KL_blind > floor."""
    if patch is None or patch.empty:
        return {}
    out = {}
    for r, g in patch.groupby("r"):
        by = {f: g[g["key_frame"] == f].sort_values("item_id") for f in FRAMES}
        first = by[FRAMES[0]]
        own = [eta(a, b, floor) for a, b in zip(first["kl_own"], first["kl_blind"], strict=True)]
        cells = [
            ci_cell([x for x in xs if not np.isnan(x)])
            for xs in [
                own,
                *(
                    [eta(a, b, floor) for a, b in zip(by[f]["kl_basis"], by[f]["kl_blind"], strict=True)]
                    for f in FRAMES
                ),
            ]
        ]
        out[int(r)] = [f"{first['kl_blind'].median():.2g}", *cells]
    return out


def placement(model: str, step: int) -> str:
    """A model's name in the table and the fit for jobs that place item i at i · ``step`` (``item_offset``; 0: the
    model's own name)."""
    return f"{model} · item i at i·{step}" if step else model


def placed_models(exp: Experiment) -> pd.DataFrame:
    """The experiment's probe records with each job's model named by :func:`placement`: one model's jobs at two
    placements are two lines of the table, each on its own fit."""
    if exp.probes.empty:
        return exp.probes
    out = with_job_columns(exp, exp.probes, {"item_offset": lambda cfg: int(cfg.item_offset)})
    out["model"] = [placement(m, s) for m, s in zip(out["model"], out["item_offset"], strict=True)]
    return out


def fit(records: pd.DataFrame, paths: dict[str, Path]) -> list[Path]:
    """Each model's pooled bases, fit on the training half of its items' clusters in both frames, to ``paths[model]``
    (an ``.npz`` of W [width, r_max] per ``layer/channel/frame``, the name kamera.probes.deficit_basis_patch reads)."""
    written = []
    for model, m in records.groupby("model", sort=True):
        train, held = split(m.drop_duplicates("item_id"))
        if not train or not held:
            raise SystemExit(f"{model}: fewer than two clusters of deficit_basis records; nothing to fit and hold out")
        r_max = int(m["k"].min())
        arrays = {
            f"{layer}/{channel}/{f}": w
            for f in FRAMES
            for (layer, channel), w in pooled_bases(in_frame(m[m["item_id"].isin(train)], f), r_max).items()
        }
        path = paths[model]
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            np.savez(out, **arrays)
        written.append(path)
    return written


def across_tasks(m: pd.DataFrame, r: int) -> dict[tuple[str, int], list[str]]:
    """One model's transfer lines: per ordered pair of its tasks (bench · subset), :func:`energy_cells` of the basis fit
    on every item of the first and scored on every item of the second, at rank ``r``; none where the model ran one
    task."""
    task = m["bench"].astype(str) + " · " + m["subset"].astype(str)
    return {
        (f"{m['model'].iloc[0]} · {fit} → {held}", r): cells
        for fit, held in permutations(sorted(task.unique()), 2)
        for cells in energy_cells(m[task == fit], m[task == held], [r]).values()
    }


def render(
    probes: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None, floor: float = ETA_FLOOR
) -> tuple[str, list[Path]]:
    values, tag = paper_or(paper, "basis"), partial_tag(footer)
    records = one_label(of_probe(probes, "deficit_basis"), "deficit_basis")
    if records.empty:
        raise SystemExit(f"{group} has no deficit_basis records (probes=[deficit_basis])")
    patch = of_probe(probes, "deficit_basis_patch")  # one configuration per model (each names its model's fit)
    patch = (
        pd.concat([one_label(g, f"deficit_basis_patch on {m}") for m, g in patch.groupby("model")])
        if len(patch)
        else patch
    )
    table = frame(records, values, patch, floor)
    if table.empty:
        raise SystemExit(f"{group}: no model has two clusters of deficit_basis records to fit on and hold out")
    notes = [
        "Share of a held-out item's ‖Δ‖² (all layer-channels) that a rank-r basis keeps: the item's own top-r "
        "SVD (the best any rank-r basis can do for it) and a per-layer-channel basis pooled over the training "
        "half's items (top-r eigenvectors of Σ V diag(s²) Vᵀ); clusters split by a seeded permutation; mean "
        f"[95% bootstrap CI] over held-out items; keys in the {FRAME} frame. K pooled / own: the rotary channel "
        "(K, MLA k_pe) alone, its keys as cached (native) or un-rotated per token by R(−p) (the keys before "
        "RoPE). Chance: a random rank-r basis (r / width). η (make basis's second pass): the held-out items' "
        "own rank-r SVD patch and the basis patch Δ W_r W_rᵀ (the pooled basis, coefficients from the item) "
        f"applied and the query run, η = 1 − KL / KL_blind over items with KL_blind > {floor:g}; blind reuse's "
        "η is 0 by definition. Lines ``model · fit → held``: the basis fit on every item of one task "
        "(benchmark · subset) and scored on every item of another, at the largest rank (transfer across "
        "content / task)."
    ]
    if "item_offset" in probes and probes["item_offset"].any():
        notes.append("Lines ``model · item i at i·s``: the job placed its i-th item at absolute position i · s "
                     "(item_offset), so B sits at a different position in every item; the other lines' items put B "
                     "at one position.")
    if any(m in values.get("models", []) for m in table.index.get_level_values(0)):
        notes.append(values["note"])
    return table_outputs(
        table,
        stem,
        f"Shared basis ({group}{tag}) — a pooled basis against each item's own SVD",
        latex_text(f"A pooled per-layer basis against the held-out item's own SVD ({group}{tag})."),
        f"tab:{group}",
        footer,
        ["\n".join(notes)],
        math=False,
    )


def fit_main(argv: list[str]) -> None:
    """``--fit``: the experiment's deficit_basis records → each model's fit file at its job's ``basis_fit``."""
    exp = load(__doc__.split("\n\n")[0], "basis", argv)
    records = one_label(of_probe(placed_models(exp), "deficit_basis"), "deficit_basis")
    if records.empty:
        raise SystemExit(f"{exp.name} has no deficit_basis records to fit on (run its first pass: make basis-fit)")
    paths = {placement(j.cfg.model.name, j.cfg.item_offset): Path(j.cfg.basis_fit) for j in exp.jobs}
    for path in fit(records, paths):
        print(f"basis fit: {path}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if "--fit" in args:
        fit_main([a for a in args if a != "--fit"])
        return
    cli(
        __doc__,
        "basis",
        lambda exp: render(
            placed_models(exp), exp.name, exp.stem("table"), exp.footer, exp.paper, float(exp.jobs[0].cfg.eta_floor)
        ),
        args,
    )


if __name__ == "__main__":
    main()
