"""The turnover curve: η of the stale and the fresh patch against the window's turnover τ, per model (§5, App. B).

    python -m experiments.turnover experiment=turnover        # paper scale (Table 1's τ = 1 values marked)
    python -m experiments.turnover experiment=turnover_tiny

Reads the ``recall`` window rows of exactly the experiment's jobs; writes <paths.figures>/<experiment>.pdf
(byte-stable) and .png — (a) mean η, (b) median η, stale solid, fresh dashed, one colour per model — and a
markdown table of the curve beside them (n, mean and median η of both patches, the stale patch's and blind
reuse's mean KL, re-prefill and stale accuracy against the window's gold). Both statistics are shown
because the mean is fragile where KL_blind is small: one item with a tiny floor and a stale KL above it
drives the mean far below zero while the median barely moves.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from experiments.common import STYLE, cli, figure_outputs
from experiments.formats import document, partial_tag
from experiments.paper import paper_or, paper_values
from experiments.windows import models, num, records, turnover_curve


def curves(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per (model, τ): :func:`experiments.windows.turnover_curve` per model."""
    recs = records(rows)
    out = [{"model": m, "arch": a, **c} for m, a in models(recs) for c in turnover_curve(recs, m)]
    return pd.DataFrame(out)


def full_turnover() -> dict[str, tuple[float, float]]:
    """The paper's (stale, fresh) η at τ = 1 per model: Table 1's (conf/experiment/table1.yaml ``paper.models``)."""
    return {m: (v["stale"], v["fresh"]) for m, v in paper_values("table1").get("models", {}).items()}


def plot(frame: pd.DataFrame, title: str) -> plt.Figure:
    full = full_turnover()
    with plt.style.context(str(STYLE)):
        fig, axes = plt.subplots(1, 2, figsize=(6.5, 2.4), sharex=True)
        for ax, stat, name in ((axes[0], "", "mean"), (axes[1], "_median", "median")):
            for i, (model, g) in enumerate(frame.groupby("model", sort=False)):
                label = f"{model} ({g['arch'].iloc[0]})"
                ax.plot(g["tau"], g[f"stale_eta{stat}"], marker="o", color=f"C{i}", label=f"{label} stale")
                ax.plot(
                    g["tau"], g[f"fresh_eta{stat}"], marker="s", color=f"C{i}", linestyle="--", label=f"{label} fresh"
                )
                if model in full and not stat:
                    ax.scatter([1.0, 1.0], full[model], marker="x", color=f"C{i}", zorder=3)
            ax.axhline(0.0, color="0.5", linewidth=0.6)
            ax.set_xlabel("turnover τ (fraction of the window replaced)")
            ax.set_ylabel(f"η, {name} over items")
            ax.set_title(f"({'ab'[stat != '']}) {name}")
        axes[1].legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
        marks = "; ×: paper at τ = 1" if frame["model"].isin(list(full)).any() else ""
        fig.suptitle(f"{title} (solid: stale patch; dashed: fresh rank-32{marks})", fontsize=8, y=1.06)
    return fig


def to_markdown(frame: pd.DataFrame, group: str, footer: str = "", paper: dict | None = None) -> str:
    paper = paper_or(paper, "turnover")
    full = full_turnover()
    lines = [
        f"**Turnover ({group})** — η = 1 − KL/KL_blind of the recalled chunk vs turnover τ; mean / median over "
        "items with a measurable deficit",
        "",
        "| model | τ | n | stale η mean | stale η median | fresh η mean | fresh η median | stale KL | blind KL | "
        "re-prefill acc | stale acc |",
        "|---" * 11 + "|",
    ]
    for _, c in frame.iterrows():
        lines.append(
            f"| {c['model']} ({c['arch']}) | {c['tau']:.2f} | {c['n']} | {num(c['stale_eta'])} | "
            f"{num(c['stale_eta_median'])} | {num(c['fresh_eta'])} | {num(c['fresh_eta_median'])} | "
            f"{num(c['stale_kl'], 3)} | {num(c['blind_kl'], 3)} | {num(c['reprefill_correct'])} | "
            f"{num(c['stale_correct'])} |"
        )
    if frame["model"].isin(list(full)).any():
        lines.append(
            f"\n{paper['note']} " + ", ".join(f"{m} {s:+.2f} (fresh {f:.2f})" for m, (s, f) in full.items()) + "."
        )
    return document(lines, footer)


def render(
    rows: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    frame = curves(rows)
    if frame.empty:
        raise SystemExit(f"{group} has no recall window rows")
    paper = paper_or(paper, "turnover")
    md = to_markdown(frame, group, footer, paper)
    return figure_outputs(plot(frame, f"Turnover ({group}{partial_tag(footer)})"), md, stem, footer)


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "turnover", lambda exp: render(exp.rows, exp.name, exp.stem("figure"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
