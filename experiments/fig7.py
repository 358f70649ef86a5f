"""Figure 7: the feature-axis patch against sparse-token PIC baselines, all given the same relocated KV.

    python -m experiments.fig7 experiment=fig7        # paper scale (MuirBench; three architectures)
    python -m experiments.fig7 experiment=fig7_tiny   # tiny scale

(a) % of the blind → re-prefill KL closed: mean η per arm and model (items whose blind reuse measurably
    loses), with 95% cluster-bootstrap error bars;
(b) flip recovery pooled over the models: on the items whose answer blind reuse flips, the share each arm
    brings back to re-prefill's answer, with its CI and the number of flipped items;
(c) per-item residual KL to re-prefill per arm (blind reuse included), pooled over the models: box plots on
    a log axis; KLs below 1e-12 (exact identities, float rounding) are drawn at 1e-12.
Re-prefill is the reference and is not drawn. Writes <paths.figures>/<experiment>.pdf (byte-stable), .png
and a markdown table of every plotted number. Paper: arXiv 2606.23581, Fig. 7 and §6 (patch 98–100% of the
KL closed, token baselines 10–71%; flip recovery on n = 583 pooled flips: patch 96%, others 21–44%).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import ERRORBAR, FULL_WIDTH, STYLE, cli, figure_outputs, require_rows
from experiments.formats import document, interval, markdown_table, natural_order, partial_tag
from experiments.paper import arm_order, paper_or

KL_FLOOR = 1e-12


def closed(rows: pd.DataFrame, arms: list[str]) -> pd.DataFrame:
    """(a): per (model, arm), mean η [CI] over items with a measurable deficit."""
    out = []
    for (model, arm), g in rows[rows["arm"].isin(arms)].groupby(["model", "arm"], sort=True):
        g = g.dropna(subset=["eta"])
        if len(g):
            mean, lo, hi = interval(g, "eta")
            out.append({"model": model, "arm": arm, "eta": mean, "lo": lo, "hi": hi, "n": g["item_id"].nunique()})
    return pd.DataFrame(out, columns=["model", "arm", "eta", "lo", "hi", "n"])


def flips(rows: pd.DataFrame, arms: list[str], paper: dict | None = None) -> pd.DataFrame:
    """(b): per arm, flip recovery pooled over models [CI], and the number of flipped (model, item) pairs; the
    paper's bar beside it where the rows come from the paper's models (conf/experiment/fig7.yaml ``paper``)."""
    paper = paper_or(paper, "fig7")
    paper = paper.get("flip", {}) if set(rows["model"]) & set(paper.get("models", [])) else {}
    out = []
    for arm in arms:
        g = rows[(rows["arm"] == arm) & rows["flip"].astype(bool)]
        mean, lo, hi = interval(g, "recovered") if len(g) else (np.nan,) * 3
        out.append({"arm": arm, "recovered": mean, "lo": lo, "hi": hi, "n": len(g), "paper": paper.get(arm)})
    return pd.DataFrame(out, columns=["arm", "recovered", "lo", "hi", "n", "paper"])


def plot(rows: pd.DataFrame, arms: list[str], a_data: pd.DataFrame, b_data: pd.DataFrame, title: str) -> plt.Figure:
    with plt.style.context(str(STYLE)):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(FULL_WIDTH, 2.3), layout="constrained")
        bar_arms = [x for x in arms if x != "blind"]
        models = sorted(a_data["model"].unique())
        width = 0.8 / max(1, len(models))
        for i, model in enumerate(models):
            g = a_data[a_data["model"] == model].set_index("arm").reindex(bar_arms)
            x = np.arange(len(bar_arms)) + (i - (len(models) - 1) / 2) * width
            err = np.abs(g[["lo", "hi"]].to_numpy().T - g["eta"].to_numpy())
            a.bar(x, 100 * g["eta"], width=width, yerr=100 * np.nan_to_num(err), color=f"C{i}", label=model,
                  error_kw=ERRORBAR)
        a.set_xticks(np.arange(len(bar_arms)), bar_arms, rotation=30, ha="right", fontsize=5.5)
        a.set_ylabel("% of reuse → re-prefill KL closed")
        a.set_title("(a) KL recovery")
        a.set_ylim(0, 140)
        a.set_yticks([0, 25, 50, 75, 100])
        a.legend(fontsize=4.5, loc="upper center", ncol=2)
        g = b_data[b_data["arm"].isin(bar_arms)]
        err = np.abs(g[["lo", "hi"]].to_numpy().T - g["recovered"].to_numpy())
        bars = b.bar(np.arange(len(g)), 100 * g["recovered"].fillna(0), yerr=100 * np.nan_to_num(err), color="C7",
                     error_kw=ERRORBAR)
        b.bar_label(bars, labels=[pct(v) if np.isfinite(v) else "–" for v in g["recovered"]], fontsize=5)
        b.set_xticks(np.arange(len(g)), list(g["arm"]), rotation=30, ha="right", fontsize=5.5)
        b.set_ylim(0, 115)
        b.set_ylabel("% of flipped answers recovered")
        b.set_title(f"(b) flip recovery (pooled, n = {int(g['n'].max()) if len(g) else 0})")
        kls = [np.maximum(rows.loc[rows["arm"] == x, "kl"].to_numpy(dtype=float), KL_FLOOR) for x in arms]
        c.boxplot(kls, showfliers=True, flierprops={"markersize": 1.5}, medianprops={"color": "C3"})
        c.set_xticks(np.arange(1, len(arms) + 1), arms, rotation=30, ha="right", fontsize=5.5)
        c.set_yscale("log")
        c.set_ylabel("per-item residual KL")
        c.set_title("(c) per-item KL")
        fig.suptitle(title, fontsize=8)
    return fig


def pct(value: float) -> str:
    """A share as a whole percentage ('-0' never shows)."""
    return f"{round(float(100 * value))}"


def to_markdown(a_data: pd.DataFrame, b_data: pd.DataFrame, kl: pd.DataFrame, title: str, footer: str,
                note: str) -> str:
    def cell(mean, lo, hi) -> str:
        return "–" if not np.isfinite(mean) else f"{pct(mean)} [{pct(lo)}, {pct(hi)}]"

    a = pd.DataFrame({"% KL closed": [cell(r.eta, r.lo, r.hi) for r in a_data.itertuples()], "n": list(a_data["n"])},
                     index=pd.Index([f"{r.model} · {r.arm}" for r in a_data.itertuples()], name="model · arm"))
    b = pd.DataFrame({"% flips recovered": [cell(r.recovered, r.lo, r.hi) + ("" if r.paper is None or pd.isna(r.paper)
                                            else f" (paper {pct(r.paper)})") for r in b_data.itertuples()],
                      "flipped items": list(b_data["n"])}, index=pd.Index(list(b_data["arm"]), name="arm"))
    return document(["\n".join([
        markdown_table(a, f"{title} (a) — % of the blind → re-prefill KL closed (mean η), [95% CI]"),
        markdown_table(b, f"{title} (b) — flip recovery pooled over models, [95% CI]"),
        markdown_table(kl, f"{title} (c) — per-item residual KL, pooled over models"),
    ]), note], footer)


def kl_quantiles(rows: pd.DataFrame, arms: list[str]) -> pd.DataFrame:
    out = {}
    for arm in arms:
        kl = rows.loc[rows["arm"] == arm, "kl"].astype(float)
        q = kl.quantile([0.25, 0.5, 0.75]) if len(kl) else pd.Series([np.nan] * 3)
        out[arm] = {"n": len(kl), "median": f"{q.iloc[1]:.2g}", "IQR": f"{q.iloc[0]:.2g} – {q.iloc[2]:.2g}",
                    "mean": f"{kl.mean():.2g}"}
    frame = pd.DataFrame(out).T
    frame.index.name = "arm"
    return frame


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None, arms: list[str] | None = None) -> tuple[str, list[Path]]:
    require_rows(rows, group)
    paper = paper_or(paper, "fig7")
    arms = natural_order([a for a in rows["arm"].unique() if a != "reprefill"], arm_order(arms, "fig7"))
    a_data, b_data = closed(rows, [x for x in arms if x != "blind"]), flips(rows, arms, paper)
    title = f"Fig. 7 ({group}{partial_tag(footer)})"
    md = to_markdown(a_data, b_data, kl_quantiles(rows, arms), title, footer, paper["note"])
    return figure_outputs(plot(rows, arms, a_data, b_data, title), md, stem, footer)


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "fig7", lambda exp: render(exp.rows, exp.name, exp.stem("figure"), exp.footer, exp.paper,
                                            exp.arms), argv)


if __name__ == "__main__":
    main()
