"""Figure 8: depth planes, each layer's token × feature map of the correction |Δ|.

    python -m experiments.fig8 experiment=fig8_tiny        # make fig8 (SCALE=paper: Qwen2.5-VL, Kimi-VL on Video-MME)

From the ``depth_planes`` probe (|Δ| pooled to token × feature bins per layer and channel; basis
``features`` = the cache's coordinates, ``components`` = Δ's singular directions by decreasing σ),
averaged over items. One row of planes per model and basis, one column per layer (all layers up to
8, else 8 evenly spaced from the first to the last); each plane shows the channels side by side
(K | V, or c_KV | k_pe). Each channel is normalised to its largest bin over all layers of its model
and basis ("0 … max"), so depth growth reads within a channel. The markdown lists every layer: mean
|Δ| and the share of the plane's mass in its top quarter of token bins (0.25 = spread evenly over
tokens, 1 = a few tokens) and of feature bins (in the component basis: how much sits in the leading
directions). Items whose grid differs from the most common one (B shorter than the bin count) are
left out and counted. Writes <paths.figures>/<experiment>.{pdf,png,md}.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, cli, figure_outputs
from experiments.formats import document, markdown_rows, partial_tag
from experiments.panels import cell, of_probe
from experiments.paper import paper_or

MAX_COLUMNS = 8


def planes(records: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean |Δ| per (model, basis, channel, layer, token_bin, feature_bin) over the items of each
    (model, basis)'s most common grid, and per (model, basis) how many items that kept / left out."""
    grids = records.groupby(["model", "basis", "item_id"])[["n_token_bins", "n_feature_bins"]].max().reset_index()
    grids["grid"] = list(zip(grids["n_token_bins"], grids["n_feature_bins"], strict=True))
    modal = grids.groupby(["model", "basis"])["grid"].agg(lambda g: g.value_counts().index[0])
    grids["keep"] = [g == modal[(m, b)] for m, b, g in zip(grids["model"], grids["basis"], grids["grid"], strict=True)]
    counts = grids.groupby(["model", "basis"])["keep"].agg(kept="sum", left_out=lambda k: int((~k).sum())).reset_index()
    kept = records.merge(grids[grids["keep"]][["model", "basis", "item_id"]], on=["model", "basis", "item_id"])
    keys = ["model", "basis", "channel", "role", "layer", "token_bin", "feature_bin"]
    return kept.groupby(keys, as_index=False)["value"].mean(), counts


def grid_of(frame: pd.DataFrame) -> np.ndarray:
    """One (model, basis, channel, layer)'s bins as a [tokens, features] array."""
    nt, nf = int(frame["token_bin"].max()) + 1, int(frame["feature_bin"].max()) + 1
    out = np.zeros((nt, nf))
    out[frame["token_bin"].astype(int), frame["feature_bin"].astype(int)] = frame["value"]
    return out


def top_quarter(plane: np.ndarray, axis: int) -> float:
    """Share of the plane's mass in the top quarter (at least one) of its bins along ``axis`` (0 tokens, 1 features)."""
    mass = plane.sum(axis=1 - axis)
    total = mass.sum()
    if total == 0:
        return float("nan")
    k = max(1, round(len(mass) / 4))
    return float(np.sort(mass)[::-1][:k].sum() / total)


def summary(mean: pd.DataFrame) -> pd.DataFrame:
    """Per (model, basis, channel, layer): mean |Δ| and the top-quarter token / feature shares."""
    out = []
    for (model, basis, channel, layer), g in mean.groupby(["model", "basis", "channel", "layer"], sort=True):
        plane = grid_of(g)
        out.append({"model": model, "basis": basis, "channel": channel, "layer": int(layer), "mean_abs": plane.mean(),
                    "token_top_quarter": top_quarter(plane, 0), "feature_top_quarter": top_quarter(plane, 1)})
    return pd.DataFrame(out)


def columns(n_layers: int) -> list[int]:
    """The layers drawn: all up to MAX_COLUMNS, else MAX_COLUMNS evenly spaced from first to last."""
    if n_layers <= MAX_COLUMNS:
        return list(range(n_layers))
    return sorted({round(float(x)) for x in np.linspace(0, n_layers - 1, MAX_COLUMNS)})


def plot(mean: pd.DataFrame, title: str) -> plt.Figure:
    rows = sorted({(m, b) for m, b in zip(mean["model"], mean["basis"], strict=True)})
    n_layers = mean.groupby(["model", "basis"])["layer"].max() + 1
    ncols = max(len(columns(int(n))) for n in n_layers)
    with plt.style.context(str(STYLE)):
        fig, axes = plt.subplots(len(rows), ncols, figsize=(min(7.0, 0.85 * ncols + 1.2), 1.15 * len(rows) + 0.5),
                                 squeeze=False)
        for r, (model, basis) in enumerate(rows):
            sub = mean[(mean["model"] == model) & (mean["basis"] == basis)]
            channels = sorted(
                sub["channel"].unique(), key=lambda c: (sub[sub["channel"] == c]["role"].iloc[0] != "rotary", c)
            )
            peak = {c: sub[sub["channel"] == c]["value"].max() for c in channels}
            layers = columns(int(n_layers[(model, basis)]))
            for j, ax in enumerate(axes[r]):
                ax.set_xticks([])
                ax.set_yticks([])
                ax.grid(False)
                if j >= len(layers):
                    ax.axis("off")
                    continue
                parts = []
                for c in channels:
                    g = sub[(sub["channel"] == c) & (sub["layer"] == layers[j])]
                    plane = grid_of(g)
                    parts += [plane / peak[c] if peak[c] > 0 else plane, np.full((plane.shape[0], 1), np.nan)]
                ax.imshow(np.hstack(parts[:-1]), vmin=0, vmax=1, cmap="magma", aspect="auto", interpolation="nearest")
                ax.set_title(f"L{layers[j]}", fontsize=6)
                if j == 0:
                    ax.set_ylabel(f"{model}\n{basis}: {' | '.join(channels)}\n↓ tokens", fontsize=5)
        mappable = plt.cm.ScalarMappable(cmap="magma", norm=plt.Normalize(0, 1))
        fig.colorbar(mappable, ax=axes.ravel().tolist(), fraction=0.015, pad=0.01, label="|Δ| / channel max")
        fig.suptitle(title)
    return fig


def to_markdown(table: pd.DataFrame, counts: pd.DataFrame, title: str, note: str) -> list[str]:
    lines = [
        f"**{title}** — mean |Δ| per layer (mean over items and bins); top-¼ shares of the plane's mass "
        "along tokens and along features (components)",
        "",
    ]
    for c in counts.itertuples(index=False):
        left = f", {c.left_out} left out (another grid)" if c.left_out else ""
        lines.append(f"- {c.model} · {c.basis}: {int(c.kept)} item(s){left}")
    for (model, basis), g in table.groupby(["model", "basis"], sort=True):
        lines += ["", f"*{model} · {basis}*", ""]
        chans = sorted(g["channel"].unique())
        head = ["layer", *[f"{c} {q}" for c in chans for q in ("mean abs(Δ)", "token top-¼", "feature top-¼")]]
        body = []
        for layer, h in g.groupby("layer", sort=True):
            by = h.set_index("channel")
            body.append(
                [
                    str(layer),
                    *[
                        cell(by.at[c, q])
                        for c in chans
                        for q in ("mean_abs", "token_top_quarter", "feature_top_quarter")
                    ],
                ]
            )
        lines += markdown_rows(head, body)
    return [*lines, "", note]


def render(
    rows: pd.DataFrame, probes: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    records = of_probe(probes, "depth_planes")
    if records.empty:
        raise SystemExit(f"{group} has no depth_planes records (probes=[depth_planes, depth_components])")
    labels = records.groupby("basis")["probe"].nunique()
    if (labels > 1).any():
        raise SystemExit(
            f"{group}: several depth_planes configurations share a basis "
            f"({sorted(records['probe'].unique())}); render one per basis"
        )
    mean, counts = planes(records)
    title = f"Fig. 8 ({group}{partial_tag(footer)})"
    md = document(to_markdown(summary(mean), counts, title, paper_or(paper, "fig8")["note"]), footer)
    return figure_outputs(plot(mean, title), md, stem, footer, place="figure")


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "fig8",
        lambda exp: render(exp.rows, exp.probes, exp.name, exp.stem("figure"), exp.footer, exp.paper),
        argv,
    )


if __name__ == "__main__":
    main()
