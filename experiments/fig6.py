"""Figure 6: prior position-independent caches select on the wrong target: tokens, depth, heads.

    python -m experiments.fig6 experiment=fig6        # paper scale (Kimi-VL, Qwen2.5-VL)
    python -m experiments.fig6 experiment=fig6_tiny   # tiny scale

(a) *wrong axis*: the share of the blind → re-prefill gap closed (mean η, %) against the fraction of B's tokens
    recomputed (the arm's ``recompute_fraction``): oracle top-p token recompute at every p the experiment
    runs, first-k carves (k = 8, 32), and the rank-16 patch as a horizontal line per model;
(b) *wrong depth*: the share of the final layer's deficit explained by injecting B's conditioned hidden
    state at one layer (probe ``injection_depth``) against the injection depth ℓ / L;
(c) *wrong grouping*: per item, the fraction of (layer × KV head) cells that, taken by descending
    ‖Δ‖² (K and V of a head summed; probe ``deficit_heads``), hold 90% of Δ's energy ("actual"), against
    the expected fraction when cells are taken in random order (200 seeded permutations per item,
    "random"). The dashed line at 0.25 is the head-sparse reference: a deficit held by the top 25% of
    heads would need at most that; the data table also gives the energy share those top-25% cells hold.
    Our reading of the panel: the paper's caption says "the deficit is not concentrated in a few attention
    heads" and the text "90% of its energy needs ≈ 51% of (layer×head) cells"; it does not define its
    "random" and "top-25% heads" bars, so we draw random order as a bar and top-25% as the reference line.

Means and medians come with 95% cluster-bootstrap CIs (bands / error bars). Writes
<paths.figures>/<experiment>.pdf (byte-stable), .png and a markdown table of every plotted number.
Paper: arXiv 2606.23581, Fig. 6 and App. C.3 (rank-16 patch 68%; oracle tokens need p ≈ 0.5; first-k ≈ 0;
a single layer explains ≈ 27% shallow, ≈ 97% deep; 51% of cells for 90% of Δ's energy).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from experiments.common import ERRORBAR, FULL_WIDTH, STYLE, cli, figure_outputs, require_rows
from experiments.formats import document, interval, markdown_table, params, partial_tag
from experiments.paper import paper_or

N_PERMUTATIONS = 200
HEAD_SPARSE = 0.25


# ----- (a) tokens --------------------------------------------------------------------------------------
def token_curve(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model, arm): mean recompute fraction and mean η [CI] of the token arms and the rank-16 patch."""
    token = rows[rows["arm_name"].isin(["oracle_topp", "first_k"])]
    frac = pd.Series([q.get("recompute_fraction", np.nan) for q in params(token)], index=token.index, dtype=float)
    token = token.assign(fraction=frac)
    patch = rows[(rows["arm_name"] == "patch") & (rows["rank"] == 16)].assign(fraction=np.nan)
    out = []
    for (model, arm), g in pd.concat([token, patch]).groupby(["model", "arm"], sort=True):
        g = g.dropna(subset=["eta"])
        if g.empty:
            continue
        mean, lo, hi = interval(g, "eta")
        out.append({"model": model, "arm": arm, "kind": g["arm_name"].iloc[0], "fraction": g["fraction"].mean(),
                    "eta": mean, "lo": lo, "hi": hi, "n": g["item_id"].nunique()})
    return pd.DataFrame(out, columns=["model", "arm", "kind", "fraction", "eta", "lo", "hi", "n"])


# ----- (b) depth ---------------------------------------------------------------------------------------
def with_clusters(probes: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """Probe records with their item's ``cluster_key`` (from the rows), for the cluster bootstrap."""
    keys = rows[["model", "item_id", "cluster_key"]].drop_duplicates(["model", "item_id"])
    return probes.merge(keys, on=["model", "item_id"], how="left")


def depth_curve(probes: pd.DataFrame) -> pd.DataFrame:
    """Per (model, injection layer): depth ℓ / L and the mean share of the final deficit explained [CI]."""
    rec = probes[probes["probe"] == "injection_depth"].dropna(subset=["explained"])
    out = []
    for (model, layer), g in rec.groupby(["model", "layer"], sort=True):
        mean, lo, hi = interval(g, "explained")
        out.append({"model": model, "layer": int(layer), "depth": g["depth"].iloc[0], "explained": mean, "lo": lo,
                    "hi": hi, "n": g["item_id"].nunique()})
    return pd.DataFrame(out, columns=["model", "layer", "depth", "explained", "lo", "hi", "n"])


# ----- (c) heads ---------------------------------------------------------------------------------------
def cells_for(energy: np.ndarray, share: float = 0.9) -> int:
    """How many cells, largest first, hold ``share`` of the total energy."""
    cum = np.cumsum(np.sort(energy)[::-1])
    return int(np.searchsorted(cum, share * cum[-1] * (1 - 1e-12))) + 1


def head_stats(energy: np.ndarray, seed: int = 0) -> dict:
    """One item's (layer × head) cell energies → actual / random-order fraction for 90%, top-25% energy share."""
    n = energy.size
    rng = np.random.default_rng(seed)
    perms = np.argsort(rng.random((N_PERMUTATIONS, n)), axis=1)
    cum = np.cumsum(energy[perms], axis=1)
    random_k = (cum < 0.9 * energy.sum() * (1 - 1e-12)).sum(axis=1) + 1
    top = math.ceil(HEAD_SPARSE * n)
    return {"cells": n, "actual": cells_for(energy) / n, "random": float(random_k.mean()) / n,
            "top25_energy": float(np.sort(energy)[::-1][:top].sum() / energy.sum())}


def head_table(probes: pd.DataFrame) -> pd.DataFrame:
    """Per item: its head statistics (items whose Δ is zero have none)."""
    rec = probes[probes["probe"] == "deficit_heads"]
    out = []
    for (model, item), g in rec.groupby(["model", "item_id"], sort=True):
        cells = g.groupby(["layer", "head"])["energy"].sum().to_numpy(dtype=float)
        if cells.sum() > 0:
            out.append({"model": model, "item_id": item, "cluster_key": g["cluster_key"].iloc[0], **head_stats(cells)})
    return pd.DataFrame(out, columns=["model", "item_id", "cluster_key", "cells", "actual", "random", "top25_energy"])


def head_summary(items: pd.DataFrame) -> pd.DataFrame:
    out = []
    for model, g in items.groupby("model", sort=True):
        line = {"model": model, "n": len(g), "cells": int(g["cells"].max())}
        for col in ("actual", "random", "top25_energy"):
            line[col], line[f"{col}_lo"], line[f"{col}_hi"] = interval(g, col)
        out.append(line)
    return pd.DataFrame(out)


# ----- the figure and its data table -------------------------------------------------------------------
def plot(tokens: pd.DataFrame, depth: pd.DataFrame, heads: pd.DataFrame, title: str) -> plt.Figure:
    with plt.style.context(str(STYLE)):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(FULL_WIDTH, 2.3), layout="constrained")
        models = sorted(set(tokens["model"]) | set(depth["model"]) | set(heads.get("model", [])))
        colour = {m: f"C{i}" for i, m in enumerate(models)}
        for model, g in tokens.groupby("model", sort=True):
            topp = g[g["kind"] == "oracle_topp"].sort_values("fraction")
            a.plot(topp["fraction"], 100 * topp["eta"], marker="o", color=colour[model])
            a.fill_between(topp["fraction"], 100 * topp["lo"], 100 * topp["hi"], color=colour[model], alpha=0.15, lw=0)
            firstk = g[g["kind"] == "first_k"].sort_values("fraction")
            a.errorbar(firstk["fraction"], 100 * firstk["eta"], yerr=100 * np.abs(firstk[["lo", "hi"]].to_numpy().T
                       - firstk["eta"].to_numpy()), marker="s", linestyle="--", color=colour[model])
            for level in g.loc[g["kind"] == "patch", "eta"]:
                a.axhline(100 * level, color=colour[model], linestyle=":", linewidth=1.0)
        a.set_xlabel("fraction of B's tokens recomputed")
        a.set_ylabel("% of blind → re-prefill gap closed")
        a.set_title("(a) tokens (dotted: rank-16 patch)")
        a.legend(handles=[Line2D([], [], color="k", marker="o", label="oracle top-p"),
                          Line2D([], [], color="k", marker="s", linestyle="--", label="first-k (8, 32)"),
                          Line2D([], [], color="k", linestyle=":", label="rank-16 patch")],
                 fontsize=4.5, loc="lower right")
        for model, g in depth.groupby("model", sort=True):
            b.plot(g["depth"], 100 * g["explained"], marker="o", color=colour[model], label=model)
            b.fill_between(g["depth"], 100 * g["lo"], 100 * g["hi"], color=colour[model], alpha=0.15, linewidth=0)
        b.axhline(90, color="grey", linestyle="--", linewidth=0.8)
        b.set_xlabel("injection depth (layer / total)")
        b.set_ylabel("% of final-layer deficit explained")
        b.set_title("(b) depth")
        b.legend(fontsize=4.5, loc="lower right")
        x = np.arange(len(heads))
        for offset, col, hatch in ((-0.2, "actual", None), (0.2, "random", "//")):
            if len(heads):
                err = np.abs(heads[[f"{col}_lo", f"{col}_hi"]].to_numpy().T - heads[col].to_numpy())
                c.bar(x + offset, heads[col], width=0.4, yerr=err, color=[colour[m] for m in heads["model"]],
                      hatch=hatch, edgecolor="white", label=col if col == "actual" else "random order",
                      error_kw=ERRORBAR)
        c.axhline(HEAD_SPARSE, color="grey", linestyle="--", linewidth=0.8, label="top-25% heads (head-sparse)")
        c.set_xticks(x, list(heads.get("model", [])), rotation=20, ha="right", fontsize=5)
        c.set_ylim(0, 1.35)
        c.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        c.set_ylabel("fraction of (layer × head) cells\nfor 90% of Δ's energy")
        c.set_title("(c) heads")
        c.legend(fontsize=4.5, loc="upper center", ncol=2)
        fig.suptitle(title, fontsize=8)
    return fig


def to_markdown(tokens: pd.DataFrame, depth: pd.DataFrame, heads: pd.DataFrame, title: str, footer: str,
                note: str) -> str:
    def ci(mean, lo, hi, scale=100.0, digits=0) -> str:
        return ("–" if np.isnan(mean)
                else f"{scale * mean:.{digits}f} [{scale * lo:.{digits}f}, {scale * hi:.{digits}f}]")

    a = pd.DataFrame(
        [
            {
                "model · arm": f"{r.model} · {r.arm}",
                "tokens recomputed": "–" if np.isnan(r.fraction) else f"{r.fraction:.2f}",
                "% gap closed": ci(r.eta, r.lo, r.hi),
                "n": r.n,
            }
            for r in tokens.itertuples()
        ],
        columns=["model · arm", "tokens recomputed", "% gap closed", "n"],
    )
    b = pd.DataFrame(
        [
            {
                "model · layer": f"{r.model} · {r.layer}",
                "depth": f"{r.depth:.2f}",
                "% explained": ci(r.explained, r.lo, r.hi),
                "n": r.n,
            }
            for r in depth.itertuples()
        ],
        columns=["model · layer", "depth", "% explained", "n"],
    )
    c = pd.DataFrame(
        [
            {
                "model": r["model"],
                "n": r["n"],
                "cells": r["cells"],
                "actual": ci(r["actual"], r["actual_lo"], r["actual_hi"], 1, 2),
                "random order": ci(r["random"], r["random_lo"], r["random_hi"], 1, 2),
                "top-25% energy share": ci(r["top25_energy"], r["top25_energy_lo"], r["top25_energy_hi"], 1, 2),
            }
            for _, r in heads.iterrows()
        ],
        columns=["model", "n", "cells", "actual", "random order", "top-25% energy share"],
    )
    parts = [
        markdown_table(f.set_index(f.columns[0]), t)
        for f, t in (
            (a, f"{title} (a) — % of the blind → re-prefill gap closed vs tokens recomputed, mean [95% CI]"),
            (b, f"{title} (b) — % of the final-layer deficit explained by one injected layer, mean [95% CI]"),
            (c, f"{title} (c) — fraction of (layer × head) cells holding 90% of Δ's energy, mean [95% CI]"),
        )
    ]
    return document(["\n".join(parts), note], footer)


def render(
    rows: pd.DataFrame, probes: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    require_rows(rows, group)
    note = paper_or(paper, "fig6")["note"]
    probes = (
        with_clusters(probes, rows)
        if not probes.empty
        else pd.DataFrame(columns=["model", "item_id", "probe", "cluster_key"])
    )
    tokens, depth, heads = token_curve(rows), depth_curve(probes), head_summary(head_table(probes))
    title = f"Fig. 6 ({group}{partial_tag(footer)})"
    return figure_outputs(
        plot(tokens, depth, heads, title), to_markdown(tokens, depth, heads, title, footer, note), stem, footer
    )


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "fig6",
        lambda exp: render(exp.rows, exp.probes, exp.name, exp.stem("figure"), exp.footer, exp.paper),
        argv,
    )


if __name__ == "__main__":
    main()
