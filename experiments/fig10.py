"""Figure 10: modality scope: accuracy of re-prefill, blind reuse, the patch and the 4D-mask oracle per setting.

    python -m experiments.fig10 experiment=fig10        # paper scale (vision-doc, video, audio, text and multi-image)
    python -m experiments.fig10 experiment=fig10_tiny   # tiny scale

A setting is one or more (model, benchmark[, subset]) pairs whose rows are pooled; the experiment config
lists them in order under ``settings:`` (the x-axis). Rows of a pair no setting names are drawn as their own
setting, "model · bench · subset". A setting without rows is drawn as missing, with the reason (a model
without an adapter, such as the audio model, or a job not run yet). Bars are mean accuracy with 95%
cluster-bootstrap error bars, one bar per arm. Writes <paths.figures>/<experiment>.pdf (byte-stable), .png
and a markdown table of every plotted number. Paper: arXiv 2606.23581, Fig. 10 and App. C.5 (vision and video
show the gap and recover; audio a smaller, partly recovered gap, n = 40, exploratory; dense text and
readout-decomposable multi-image MC show none).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import ERRORBAR, FULL_WIDTH, STYLE, cli, figure_outputs, require_rows
from experiments.formats import interval, markdown_table, natural_order, partial_tag, stuck_rate, with_stuck
from experiments.paper import arm_order, paper_or, paper_values
from kamera.sweep.status import why_missing


def matches(rows: pd.DataFrame, spec: dict) -> pd.Series:
    keep = (rows["model"] == spec["model"]) & (rows["bench"] == spec["bench"])
    return keep & (rows["subset"] == spec["subset"]) if spec.get("subset") else keep


def assign(rows: pd.DataFrame, settings: list[dict]) -> pd.DataFrame:
    """``rows`` with a ``setting`` column: the first setting naming the row's pair, else "model · bench · subset"."""
    label = pd.Series(
        [f"{m} · {b} · {s}" for m, b, s in zip(rows["model"], rows["bench"], rows["subset"], strict=True)],
        index=rows.index,
        dtype=object,
    )
    named = pd.Series(False, index=rows.index)
    for spec in settings:
        hit = matches(rows, spec) & ~named
        label[hit], named = spec["label"], named | hit
    return rows.assign(setting=label)


def accuracy(rows: pd.DataFrame, settings: list[dict]) -> tuple[pd.DataFrame, list[str]]:
    """Per (setting, arm): mean accuracy [CI], n and the stuck rate of generated answers (NaN for logit-scored ones);
    and the settings in axis order."""
    rows = assign(rows, settings)
    order = list(dict.fromkeys([s["label"] for s in settings] + sorted(set(rows["setting"]))))
    out = []
    for (setting, arm), g in rows.groupby(["setting", "arm"], sort=True):
        mean, lo, hi = interval(g, "correct")
        n = len(g.drop_duplicates(["model", "item_id"]))  # pooled models share item ids: count (model, item)
        out.append(
            {
                "setting": setting,
                "arm": arm,
                "acc": mean,
                "lo": lo,
                "hi": hi,
                "n": n,
                "models": ", ".join(sorted(g["model"].unique())),
                "stuck": stuck_rate(g),
            }
        )
    return pd.DataFrame(out, columns=["setting", "arm", "acc", "lo", "hi", "n", "models", "stuck"]), order


def plot(acc: pd.DataFrame, order: list[str], arms: list[str], missing: dict[str, str], title: str) -> plt.Figure:
    x = np.arange(len(order))
    width = 0.8 / max(1, len(arms))
    with plt.style.context(str(STYLE)):
        fig, ax = plt.subplots(figsize=(FULL_WIDTH, 2.4), layout="constrained")
        for i, arm in enumerate(arms):
            g = acc[acc["arm"] == arm].set_index("setting").reindex(order)
            err = np.nan_to_num(np.abs(g[["lo", "hi"]].to_numpy(dtype=float).T - g["acc"].to_numpy(dtype=float)))
            ax.bar(
                x + (i - (len(arms) - 1) / 2) * width,
                g["acc"].fillna(0),
                width=width,
                yerr=err,
                color=f"C{i}",
                label=arm,
                error_kw=ERRORBAR,
            )
        for j, setting in enumerate(order):
            if not (acc["setting"] == setting).any():
                ax.text(
                    j,
                    0.02,
                    "missing: " + missing.get(setting, "no rows"),
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=4.5,
                    color="0.35",
                )
        ax.set_xticks(x, order, rotation=15, ha="right", fontsize=5.5)
        ax.set_ylim(0, 1.15)
        ax.set_ylabel("task accuracy")
        ax.set_title(title)
        ax.legend(fontsize=5, ncol=len(arms), loc="upper center")
    return fig


def to_markdown(
    acc: pd.DataFrame,
    order: list[str],
    arms: list[str],
    missing: dict[str, str],
    title: str,
    footer: str,
    paper: dict | None = None,
) -> str:
    """The data table, the paper's accuracies beside ours: a vision-doc setting's are Table 4's two-page cells of the
    model conf/experiment/fig10.yaml's ``paper.table4`` names (conf/experiment/table4.yaml ``paper.accuracy``)."""
    values, table4 = paper_or(paper, "fig10"), paper_values("table4")["accuracy"]
    table = {}
    for setting in order:
        g = acc[acc["setting"] == setting].set_index("arm")
        if g.empty:
            table[setting] = {
                "models": "–",
                "n": "–",
                **dict.fromkeys(arms, "missing: " + missing.get(setting, "no rows")),
            }
            continue
        paper = table4.get(values.get("table4", {}).get(setting), {}).get("two_page", {})
        line = {"models": ", ".join(sorted(set(", ".join(g["models"]).split(", ")))), "n": str(int(g["n"].max()))}
        for arm in arms:
            cell = (
                "–"
                if arm not in g.index
                else with_stuck(f"{g.at[arm, 'acc']:.2f} [{g.at[arm, 'lo']:.2f}, {g.at[arm, 'hi']:.2f}]",
                                g.at[arm, "stuck"])
            )
            line[arm] = cell + (f" (paper {paper[arm]:.2f})" if arm in paper and arm in g.index else "")
        table[setting] = line
    frame = pd.DataFrame(table).T
    frame.index.name = "setting"
    return markdown_table(frame, f"{title} — accuracy, mean [95% cluster-bootstrap CI]", footer, [values["note"]])


def render(
    rows: pd.DataFrame,
    settings: list[dict],
    missing: dict[str, str],
    group: str,
    stem: Path,
    footer: str = "",
    paper: dict | None = None,
    arms: list[str] | None = None,
) -> tuple[str, list[Path]]:
    """``settings``: the config's ``settings`` list; ``missing``: why a setting without rows has none."""
    require_rows(rows, group)
    bad = [s for s in settings if not isinstance(s, dict) or not {"label", "model", "bench"} <= set(s)]
    if bad:
        raise SystemExit(f"{group}: settings entries need label, model and bench (subset optional): {bad}")
    acc, order = accuracy(rows, settings)
    arms = natural_order(rows["arm"], arm_order(arms, "fig10"))
    title = f"Fig. 10 ({group}{partial_tag(footer)})"
    md = to_markdown(acc, order, arms, missing, title, footer, paper)
    return figure_outputs(plot(acc, order, arms, missing, title), md, stem, footer)


def main(argv: list[str] | None = None) -> None:
    def draw(exp):
        from omegaconf import OmegaConf

        settings = OmegaConf.to_container(exp.jobs[0].cfg.get("settings") or [], resolve=True)
        present = set(zip(exp.rows["model"], exp.rows["bench"], strict=True)) if not exp.rows.empty else set()
        missing = {s["label"]: why_missing(s["model"]) for s in settings if (s["model"], s["bench"]) not in present}
        return render(exp.rows, settings, missing, exp.name, exp.stem("figure"), exp.footer, exp.paper, exp.arms)

    cli(__doc__, "fig10", draw, argv)


if __name__ == "__main__":
    main()
