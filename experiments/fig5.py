"""Figure 5: KL to re-prefill vs patch rank m ∈ {1, 2, 4, …, 128, full}, one line per model, blind floor dashed.

    python -m experiments.fig5 experiment=fig5_tiny

Reads the plain patch rows (all layers, one SVD per layer-channel) and the blind rows of exactly the
experiment's jobs; writes <paths.figures>/<experiment>.pdf (byte-stable) and .png plus a markdown
table of the curve beside it, each with the provenance footer.

Each point sits at the rank the patch really had: the ``effective_rank`` of its rows (a requested m
above min(n_B, width) is clamped to full rank), averaged over items. A requested rank whose patches
were all clamped is the full patch, so its point coincides with "full" instead of being drawn at m.

Each line is the mean KL over items with its 95% bootstrap band (items sharing a ``cluster_key`` resampled
together, ``kamera.metrics.bootstrap_ci``), and the median beside it (dotted, × markers); the data table gives
both with their CIs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, cli, document, figure_outputs, interval, paper_or, partial_tag

FULL = "full"


def curve(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model, subset, requested m): n items, mean and median KL with their 95% (cluster) bootstrap CIs,
    the mean effective rank, and the blind KL."""
    params = rows["params"].map(json.loads)
    plain = (rows["arm_name"] == "patch") & params.map(lambda p: p.get("layers") == "all" and p.get("granularity") == "layer")
    patch = rows[plain].assign(m=[FULL if pd.isna(r) else str(int(r)) for r in rows.loc[plain, "rank"]])
    out = []
    for (model, subset, m), g in patch.groupby(["model", "subset", "m"]):
        blind = rows[(rows["model"] == model) & (rows["subset"] == subset) & (rows["arm"] == "blind")]["kl"]
        mean, lo, hi = interval(g, "kl")
        median, median_lo, median_hi = interval(g, "kl", np.median)
        out.append({"model": model, "subset": subset, "m": m, "n": g["item_id"].nunique(), "kl_mean": mean,
                    "kl_lo": lo, "kl_hi": hi, "kl_median": median, "median_lo": median_lo, "median_hi": median_hi,
                    "m_eff": g["effective_rank"].mean(), "blind_kl": blind.mean() if len(blind) else math.nan})
    frame = pd.DataFrame(out)
    # one line per model, or per model · subset where a model ran several subsets
    several = frame.groupby("model")["subset"].nunique() > 1
    frame["line"] = [f"{m} · {s}" if several[m] else m for m, s in zip(frame["model"], frame["subset"], strict=True)]
    frame["order"] = frame["m"].map(lambda m: math.inf if m == FULL else int(m))
    return frame.sort_values(["line", "order"]).drop(columns="order").reset_index(drop=True)


def plot(frame: pd.DataFrame, title: str) -> plt.Figure:
    with plt.style.context(str(STYLE)):
        fig, ax = plt.subplots()
        ranks = sorted({int(m) for m in frame["m"] if m != FULL})
        for i, (line, g) in enumerate(frame.groupby("line", sort=True)):
            colour = f"C{i}"
            ax.plot(g["m_eff"], g["kl_mean"], marker="o", color=colour, label=line)
            ax.fill_between(g["m_eff"], g["kl_lo"], g["kl_hi"], color=colour, alpha=0.15, linewidth=0)
            ax.plot(g["m_eff"], g["kl_median"], marker="x", linestyle=":", linewidth=0.8, color=colour)
            ax.axhline(g["blind_kl"].iloc[0], color=colour, linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ranks, list(map(str, ranks)))
        ax.set_xlabel("patch rank m (as applied: at most min(n_B, width))")
        ax.set_ylabel("KL to re-prefill (mean, 95% band)")
        ax.set_title(title + " (dotted ×: median; dashed: blind)")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def cell(kl: float, lo: float, hi: float, m: str, m_eff: float) -> str:
    """'3.6e-15 [3.3e-15, 3.8e-15]', with the effective rank beside it where the patch was clamped below m (and
    for full)."""
    clamped = m == FULL or not math.isclose(m_eff, int(m))
    return f"{kl:.2e} [{lo:.2e}, {hi:.2e}]" + (f" (m_eff {m_eff:.3g})" if clamped else "")


def to_markdown(frame: pd.DataFrame, group: str, footer: str = "", paper: dict | None = None) -> str:
    ranks = list(frame["m"].unique())
    lines = [f"**Figure 5 ({group})** — KL to re-prefill by patch rank, mean and median over items, each with its "
             "95% bootstrap CI (clusters of items resampled together); blind = no patch; m_eff = the mean rank "
             "actually applied where it is below m"]
    for stat, col, lo, hi in (("mean", "kl_mean", "kl_lo", "kl_hi"), ("median", "kl_median", "median_lo", "median_hi")):
        lines += ["", f"{stat} [95% CI]:", "",
                  "| model | n | blind | " + " | ".join(f"m={m}" for m in ranks) + " |", "|---" * (3 + len(ranks)) + "|"]
        for line, g in frame.groupby("line", sort=True):
            cells = {m: cell(k, a, b, m, e) for m, k, a, b, e in zip(g["m"], g[col], g[lo], g[hi], g["m_eff"], strict=True)}
            lines.append(f"| {line} | {int(g['n'].max())} | {g['blind_kl'].iloc[0]:.2e} | "
                         + " | ".join(cells.get(m, "–") for m in ranks) + " |")
    lines.append(f"\n{paper_or(paper, 'fig5')['note']}")
    return document(lines, footer)


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None) -> tuple[str, list[Path]]:
    frame = curve(rows)
    if frame.empty:
        raise SystemExit(f"{group} has no plain patch rows (arms patch_r<m> / patch_full)")
    md = to_markdown(frame, group, footer, paper)
    return figure_outputs(plot(frame, f"Fig. 5 ({group}{partial_tag(footer)})"), md, stem, footer)


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "fig5", lambda exp: render(exp.rows, exp.name, exp.stem("figure"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
