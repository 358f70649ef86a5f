"""Figure 4: why cheap estimation of the deficit is still open.

    python -m experiments.fig4 experiment=fig4_tiny        # make fig4 (SCALE=paper: Kimi-VL, Qwen2.5-VL on Video-MME)

(a) recall of the true top-50% ‖Δ‖ tokens of B by cheap selectors (``selector_recall`` probe: the
cross-attention mass A → B, the first k tokens, the canonical's K-norm, random subsets; mean over
items; the oracle selector, recall 1 by construction, is listed in the table as a check, not drawn).
(b) Spearman's ρ of per-token ‖Δ_i‖ with optical-flow motion, warp residual, frame similarity and
the vision-embedding difference to the previous frame (``video_signals`` probe). ρ is computed over
the tokens of all of a model's items pooled (tokens of different items kept apart), which is what the
bars show; the table adds the mean and range of the per-item ρ. Writes <paths.figures>/<experiment>.{pdf,png,md}.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, cli, figure_outputs
from experiments.formats import document, markdown_rows, partial_tag
from experiments.panels import blank, cell, of_probe, one_label
from experiments.paper import paper_or
from kamera.diagnostics.records import RANDOM, SIGNALS, signal_spearman

ORACLE = "oracle"
TOKEN_KEYS = ["model", "bench", "item_id", "token", "frame", "row", "col"]  # items of two benchmarks stay apart


def recall_table(selectors: pd.DataFrame) -> pd.DataFrame:
    """Per (model, selector): items and mean recall."""
    g = selectors.groupby(["model", "selector"])["value"]
    return pd.DataFrame({"n": g.size(), "recall": g.mean()}).reset_index()


def spearman_table(video: pd.DataFrame) -> pd.DataFrame:
    """Per (model, signal): pooled ρ over all tokens, and the per-item ρ's mean, min, max and count."""
    tokens = video[[*TOKEN_KEYS, "quantity", "value"]]
    pooled = pd.DataFrame(signal_spearman(tokens, by=["model"]))
    items = pd.DataFrame(signal_spearman(tokens, by=["model", "bench", "item_id"]))
    per = items.groupby(["model", "signal"])["value"].agg(["mean", "min", "max", "count"]).reset_index()
    out = pooled.rename(columns={"value": "pooled"})[["model", "signal", "pooled", "n_tokens"]]
    return out.merge(per, on=["model", "signal"], how="left")


def paper_marks(ax: plt.Axes, names: list[str], paper: dict[str, float]) -> None:
    """The paper's value of each group that has one, as a black tick across the group."""
    xs = [(i, paper[n]) for i, n in enumerate(names) if n in paper and n != RANDOM]
    for j, (i, v) in enumerate(xs):
        ax.hlines(v, i - 0.1, i + 0.9 - 0.1, color="k", linewidth=1.2, label="paper" if j == 0 else None)


def plot(recall: pd.DataFrame, rho: pd.DataFrame, title: str, paper: dict) -> plt.Figure:
    with plt.style.context(str(STYLE)):
        fig, (a, b) = plt.subplots(1, 2, figsize=(6.75, 2.4))
        if recall.empty:
            blank(a, "no selector_recall records")
        else:
            drawn = recall[recall["selector"] != ORACLE]
            names = sorted(drawn["selector"].unique(), key=lambda s: (s == RANDOM, s))
            models = sorted(drawn["model"].unique())
            width = 0.8 / len(models)
            for i, model in enumerate(models):
                r = drawn[drawn["model"] == model].set_index("selector")["recall"]
                a.bar(np.arange(len(names)) + i * width, [r.get(s, np.nan) for s in names], width, label=model)
            a.axhline(0.5, color="0.4", linestyle="--", linewidth=0.8)
            paper_marks(a, names, paper.get("recall", {}))
            a.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, rotation=20)
            a.set_ylim(0, 1)
            a.set_ylabel("recall of true top-50% ‖Δ‖ tokens")
            a.legend(loc="upper right", fontsize=5)
        a.set_title("(a) no cheap selector locates Δ")
        if rho.empty:
            blank(b, "no video_signals records\n(B needs frames with a previous frame)")
        else:
            models = sorted(rho["model"].unique())
            width = 0.8 / len(models)
            for i, model in enumerate(models):
                r = rho[rho["model"] == model].set_index("signal")["pooled"]
                b.bar(np.arange(len(SIGNALS)) + i * width, [r.get(s, np.nan) for s in SIGNALS], width, label=model)
            b.axhline(0, color="0.2", linewidth=0.6)
            paper_marks(b, list(SIGNALS), paper.get("rho", {}))
            b.set_xticks(np.arange(len(SIGNALS)) + 0.4 - width / 2, SIGNALS, rotation=20)
            b.set_ylim(-1, 1)
            b.set_ylabel("Spearman ρ(‖Δ_i‖, signal)")
            b.legend(loc="upper left", fontsize=5)
        b.set_title("(b) per-token signals")
        fig.suptitle(title)
        fig.tight_layout()
    return fig


def to_markdown(recall: pd.DataFrame, rho: pd.DataFrame, title: str, paper: dict) -> list[str]:
    lines = [f"**{title}**", "", "*(a) selector recall of the true top-50% ‖Δ‖ tokens (mean over items)*", ""]
    if recall.empty:
        lines.append("no selector_recall records")
    else:
        body = [[m, s, str(int(n)), cell(v), cell(paper.get("recall", {}).get(s), ".2f")]
                for m, s, n, v in recall[["model", "selector", "n", "recall"]].itertuples(index=False)]
        lines += markdown_rows(["model", "selector", "items", "recall", "paper"], body)
    lines += [
        "",
        "*(b) Spearman ρ of per-token ‖Δ_i‖ with each signal: pooled over items; per-item mean [min, max]*",
        "",
    ]
    if rho.empty:
        lines.append("no video_signals records (B needs frames with a previous frame of the same token grid)")
    else:
        body = [
            [
                r.model,
                r.signal,
                str(int(r.n_tokens)),
                cell(r.pooled, "+.3f"),
                f"{cell(r.mean, '+.3f')} [{cell(r.min, '+.2f')}, {cell(r.max, '+.2f')}]",
                str(int(r.count)),
            ]
            for r in rho.itertuples(index=False)
        ]
        lines += markdown_rows(["model", "signal", "tokens", "ρ pooled", "ρ per item", "items"], body)
    return [*lines, "", paper["note"]]


def render(
    rows: pd.DataFrame, probes: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    paper = paper_or(paper, "fig4")
    selectors = one_label(of_probe(probes, "selector_recall"), "selector_recall")
    video = one_label(of_probe(probes, "video_signals"), "video_signals")
    if selectors.empty and video.empty:
        raise SystemExit(
            f"{group} has no selector_recall or video_signals records (probes=[selector_recall, video_signals])"
        )
    recall = recall_table(selectors) if not selectors.empty else pd.DataFrame()
    rho = spearman_table(video) if not video.empty else pd.DataFrame()
    title = f"Fig. 4 ({group}{partial_tag(footer)})"
    md = document(to_markdown(recall, rho, title, paper), footer)
    return figure_outputs(plot(recall, rho, title, paper), md, stem, footer, place="figure")


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "fig4",
        lambda exp: render(exp.rows, exp.probes, exp.name, exp.stem("figure"), exp.footer, exp.paper),
        argv,
    )


if __name__ == "__main__":
    main()
