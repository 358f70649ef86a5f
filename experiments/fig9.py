"""Figure 9: architecture generality: low-rank Δ, monotone rank-m recovery, and a gap that tracks capability.

    python -m experiments.fig9 experiment=fig9        # paper scale (MMLongBench-Doc; MHA VLMs, hybrids, MLA ref)
    python -m experiments.fig9 experiment=fig9_tiny   # tiny scale

Per model (bars; models with MLA attention are drawn as reference lines, as the paper draws Kimi-VL):
(a) e90/n_B of Δ's content channel (V; c_KV on MLA; ``e90_nb_content``), mean over items;
(b) % of blind-reuse KL closed (mean η over items with a measurable deficit) at every patch rank run
    (16 / 64 / 256 at paper scale);
(c) blind-reuse KL (KL(re-prefill ‖ blind), mean over items, log axis): the size of the gap.
Error bars are 95% cluster-bootstrap CIs. Writes <paths.figures>/<experiment>.pdf (byte-stable), .png and a
markdown table of every plotted number. Paper: arXiv 2606.23581, Fig. 9 and App. C.4 (the gap is near zero
for SmolVLM2 and LLaVA-1.5; e90/n_B ≤ 0.30; recovery monotone in rank on the pure-MHA VLMs).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import ERRORBAR, FULL_WIDTH, STYLE, cli, figure_outputs, require_rows
from experiments.formats import interval, markdown_table, partial_tag
from experiments.paper import paper_or


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model: attention, n, e90/n_B [CI], blind KL [CI], and η [CI] per patch rank (columns eta@<m>)."""
    out = []
    for model, m in rows.groupby("model", sort=True):
        line = {"model": model, "attention": m["attention"].iloc[0], "n": m["item_id"].nunique()}
        e90 = m.dropna(subset=["e90_nb_content"]).drop_duplicates("item_id")
        line["e90"], line["e90_lo"], line["e90_hi"] = interval(e90, "e90_nb_content") if len(e90) else (np.nan,) * 3
        blind = m[m["arm_name"] == "blind"]
        line["kl"], line["kl_lo"], line["kl_hi"] = interval(blind, "kl") if len(blind) else (np.nan,) * 3
        for rank, g in m[m["arm_name"] == "patch"].groupby("rank"):
            g = g.dropna(subset=["eta"])
            line[f"eta@{rank:g}"], line[f"eta@{rank:g}_lo"], line[f"eta@{rank:g}_hi"] = (
                interval(g, "eta") if len(g) else (np.nan,) * 3)
        out.append(line)
    return pd.DataFrame(out)


def ranks(frame: pd.DataFrame) -> list[str]:
    return sorted({c[4:] for c in frame.columns if c.startswith("eta@") and not c.endswith(("_lo", "_hi"))}, key=float)


def errors(frame: pd.DataFrame, col: str, scale: float = 1.0) -> np.ndarray:
    return scale * np.nan_to_num(np.abs(frame[[f"{col}_lo", f"{col}_hi"]].to_numpy(dtype=float).T
                                        - frame[col].to_numpy(dtype=float)))


def plot(frame: pd.DataFrame, title: str) -> plt.Figure:
    bars, refs = frame[frame["attention"] != "MLA"], frame[frame["attention"] == "MLA"]
    x = np.arange(len(bars))
    with plt.style.context(str(STYLE)):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(FULL_WIDTH, 2.3), layout="constrained")
        a.bar(x, bars["e90"], yerr=errors(bars, "e90"), color="C0", error_kw=ERRORBAR)
        for i, r in enumerate(refs.itertuples()):
            a.axhline(r.e90, color=f"C{3 + i}", linestyle="--", linewidth=0.8, label=f"{r.model} (MLA ref) {r.e90:.2f}")
        a.set_ylabel("e90 / n_B of Δ (content channel)")
        a.set_title("(a) low-rank")
        if len(refs):
            a.legend(fontsize=4.5, loc="upper right")
        rs = ranks(bars)
        width = 0.8 / max(1, len(rs))
        for i, rank in enumerate(rs):
            col = f"eta@{rank}"
            b.bar(x + (i - (len(rs) - 1) / 2) * width, 100 * bars[col], width=width, yerr=errors(bars, col, 100),
                  color=f"C{i}", label=f"rank-{rank} patch", error_kw=ERRORBAR)
        b.set_ylabel("% of blind-reuse KL closed")
        b.set_ylim(0, 125)
        b.set_yticks([0, 25, 50, 75, 100])
        b.set_title("(b) rank-m recovery")
        b.legend(fontsize=4.5, loc="upper center", ncol=3)
        c.errorbar(x, bars["kl"], yerr=errors(bars, "kl"), marker="o", linestyle="none", color="C0", **ERRORBAR)
        for i, r in enumerate(refs.itertuples()):
            c.axhline(r.kl, color=f"C{3 + i}", linestyle="--", linewidth=0.8, label=f"{r.model} (MLA ref)")
        c.set_yscale("log")
        c.set_ylabel("blind-reuse KL (the gap)")
        c.set_title("(c) gap size")
        if len(refs):
            c.legend(fontsize=4.5, loc="center right")
        for ax in (a, b, c):
            ax.set_xticks(x, list(bars["model"]), rotation=30, ha="right", fontsize=5)
        fig.suptitle(title, fontsize=8)
    return fig


def to_markdown(frame: pd.DataFrame, title: str, footer: str, paper: dict | None = None) -> str:
    """The data table, the paper's e90/n_B (conf/experiment/fig9.yaml ``paper``) beside ours."""
    paper = paper_or(paper, "fig9")

    def ci(r, col: str, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
        v = r[col]
        if not np.isfinite(v):
            return "–"
        return f"{fmt.format(scale * v)} [{fmt.format(scale * r[f'{col}_lo'])}, {fmt.format(scale * r[f'{col}_hi'])}]"

    table = {}
    for _, r in frame.iterrows():
        e90 = paper.get("e90", {}).get(r["model"])
        line = {"attention": r["attention"] + (" (reference)" if r["attention"] == "MLA" else ""), "n": r["n"],
                "e90/n_B": ci(r, "e90") + (f" (paper {e90:.2f})" if e90 is not None else ""),
                "blind KL": ci(r, "kl", "{:.2g}")}
        line.update({f"% closed, rank {k}": ci(r, f"eta@{k}", "{:.0f}", 100) for k in ranks(frame)})
        table[r["model"]] = line
    out = pd.DataFrame(table).T
    out.index.name = "model"
    return markdown_table(out, f"{title} — e90/n_B, % of blind KL closed per patch rank, blind KL: mean [95% "
                          "cluster-bootstrap CI]", footer, [paper["note"]])


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None) -> tuple[str, list[Path]]:
    require_rows(rows, group)
    frame = summary(rows)
    title = f"Fig. 9 ({group}{partial_tag(footer)})"
    return figure_outputs(plot(frame, title), to_markdown(frame, title, footer, paper), stem, footer)


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "fig9", lambda exp: render(exp.rows, exp.name, exp.stem("figure"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
