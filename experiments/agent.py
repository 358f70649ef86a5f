"""Agent replay (beyond the paper, issue 32, docs/agent.md): a table per trace × policy and a figure.

    python -m experiments.agent experiment=agent_tiny    # tiny: toy window model + tiny Qwen2.5-VL (make agent)
    python -m experiments.agent experiment=agent_paper   # Qwen2.5-VL / Kimi-VL on Video-MME (make agent SCALE=paper)

Table: one row per (model, trace, policy): prompt tokens prefilled per trace relative to ``prefix`` (the ratio of
each pool's totals; mean and 95% cluster-bootstrap CI over pools), the median tokens a step, agreement with
``recompute`` at each step's query (mean over steps and pools, CI resampling pools), median KL to ``recompute``
and η, conditioned forwards, canonical prefills and layer-channel SVDs per trace, the store's bytes after the
last step, the modelled H100 time of the forwards (FLOPs of ``trace.cost_model``, the project's throughput:
:mod:`kamera.sweep.cost`) beside the measured CPU seconds. A note per (model, trace) gives what placement adds
over ``kamera`` (paired over pools). Figure: cumulative prefilled tokens against step (mean over pools), one
panel per (model, trace); and cost against fidelity, one point per (trace, policy).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, cli, figure_outputs, require_rows, suffixed, table_outputs
from experiments.formats import ci_cell, cluster_labels, kl_fmt, latex_text, natural_order, partial_tag
from kamera.metrics import paired_bootstrap_ci
from kamera.sweep.cost import H100_BF16_FLOPS, MFU, OVERHEAD

ORDER = [
    "recompute",
    "prefix",
    "relocate",
    "kamera",
    "kamera_lazy",
    "kamera_never",
    "kamera_placement",
    "kamera_offline",
]
TRACES = ["web", "video", "doc", "jsonl"]


def agent_rows(rows: pd.DataFrame) -> pd.DataFrame:
    if rows.empty or "shape" not in rows:
        return rows.iloc[0:0]
    return rows[rows["shape"] == "agent"]


def h100_ms(flops: float) -> float:
    """Modelled H100 milliseconds of ``flops`` model FLOPs (kamera.sweep.cost's throughput)."""
    return 1e3 * flops * OVERHEAD / (H100_BF16_FLOPS * MFU)


def per_pool(rows: pd.DataFrame) -> pd.DataFrame:
    """One record per (model, trace, policy, pool): the trace's totals and the pool's cluster."""
    g = rows.groupby(["model", "trace", "arm", "item_id"], sort=False)
    out = g.agg(
        tokens=("tokens", "sum"),
        forwards=("forwards", "sum"),
        solo=("solo_forwards", "sum"),
        svds=("svds", "sum"),
        flops=("flops", "sum"),
        seconds=("seconds", "sum"),
        agree=("agree", "mean"),
        stored=("bytes_stored", "last"),
        cluster_key=("cluster_key", "first"),
    )
    return out.reset_index()


def ratio_to(pools: pd.DataFrame, base: str) -> pd.Series:
    """Each pool's tokens over ``base``'s on the same (model, trace, pool) (NaN where the base prefilled none)."""
    ref = pools[pools["arm"] == base].set_index(["model", "trace", "item_id"])["tokens"]
    keys = list(zip(pools["model"], pools["trace"], pools["item_id"], strict=True))
    den = np.array([ref.get(k, np.nan) for k in keys], dtype=float)
    return pd.Series(
        np.where(den > 0, pools["tokens"].to_numpy(float) / np.where(den > 0, den, 1), np.nan),
        index=pools.index,
    )


def table(rows: pd.DataFrame) -> pd.DataFrame:
    pools = per_pool(rows)
    pools["rel"] = ratio_to(pools, "prefix")
    out = {}
    for (model, trace), m in rows.groupby(["model", "trace"], sort=False):
        pm = pools[(pools["model"] == model) & (pools["trace"] == trace)]
        for arm in natural_order(m["arm"], ORDER):
            r, p = m[m["arm"] == arm], pm[pm["arm"] == arm]
            clusters = cluster_labels(p)
            out[(model, trace, arm)] = {
                "tokens / prefix": ci_cell(p["rel"].tolist(), clusters=clusters),
                "tokens / step (med)": f"{r['tokens'].median():.0f}",
                "agree with recompute": ci_cell(
                    r["agree"].astype(float).tolist(), clusters=cluster_labels(r)
                ),
                "KL (med)": kl_fmt(r["kl"].median()),
                "η (med)": "–" if r["eta"].isna().all() else f"{r['eta'].median():.2f}",
                "fwd / canon / SVD": f"{p['forwards'].mean():.1f} / {p['solo'].mean():.1f} / {p['svds'].mean():.0f}",
                "stored KiB": f"{p['stored'].mean() / 1024:.0f}",
                "H100 ms (model)": f"{h100_ms(p['flops'].mean()):.2f}",
                "CPU s": f"{p['seconds'].mean():.2f}",
                "pools": str(p["item_id"].nunique()),
            }
    frame = pd.DataFrame(out).T
    frame.index.names = ["model", "trace", "policy"]
    return frame


def paired_note(pools: pd.DataFrame, model: str, trace: str, a_arm: str, b_arm: str) -> str | None:
    """'a − b: tokens per trace …, agreement …' paired over the pools both ran (None when one is absent)."""
    m = pools[(pools["model"] == model) & (pools["trace"] == trace)]
    a, b = m[m["arm"] == a_arm].set_index("item_id"), m[m["arm"] == b_arm].set_index("item_id")
    common = a.index.intersection(b.index)
    if not len(common):
        return None
    a, b = a.loc[common], b.loc[common]
    clusters = [str(c) for c in b["cluster_key"]]
    dt = paired_bootstrap_ci(a["tokens"].tolist(), b["tokens"].tolist(), clusters=clusters)
    da = paired_bootstrap_ci(a["agree"].tolist(), b["agree"].tolist(), clusters=clusters)
    return (
        f"{model} · {trace}: {a_arm} − {b_arm}: tokens per trace {dt[0]:+.1f} [{dt[1]:+.1f}, {dt[2]:+.1f}], "
        f"agreement with recompute {da[0]:+.2f} [{da[1]:+.2f}, {da[2]:+.2f}] (paired over {len(common)} pools)"
    )


def placement_notes(rows: pd.DataFrame) -> list[str]:
    """What placement adds over ``kamera`` per (model, trace), and how far the online scheduler is from the offline
    optimum where it ran: tokens and agreement, paired over pools."""
    pools = per_pool(rows)
    pairs = [("kamera_placement", "kamera"), ("kamera_offline", "kamera_placement")]
    return [
        line
        for (model, trace) in pools.groupby(["model", "trace"], sort=False).groups
        for a, b in pairs
        if (line := paired_note(pools, model, trace, a, b))
    ]


def plot(rows: pd.DataFrame, title: str) -> plt.Figure:
    """One row of panels per model: cumulative prefilled tokens against step per trace, then cost vs fidelity."""
    models = list(dict.fromkeys(rows["model"]))
    traces = [t for t in TRACES if t in set(rows["trace"])]
    arms = natural_order(rows["arm"], ORDER)
    pools = per_pool(rows)
    pools["rel"] = ratio_to(pools, "recompute")
    markers = dict(zip(TRACES, "os^D", strict=True))
    with plt.style.context(str(STYLE)):
        fig, axes = plt.subplots(
            len(models),
            len(traces) + 1,
            figsize=(2.3 * (len(traces) + 1), 2.0 * len(models)),
            squeeze=False,
            layout="constrained",
        )
        for row_axes, model in zip(axes, models, strict=True):
            for ax, trace in zip(row_axes, traces, strict=False):
                g = rows[(rows["model"] == model) & (rows["trace"] == trace)]
                for i, arm in enumerate(arms):
                    curve = g[g["arm"] == arm].groupby("step")["cum_tokens"].mean()
                    ax.plot(curve.index, curve.to_numpy(), color=f"C{i}", linewidth=0.9)
                ax.set_title(f"{model} · {trace}", fontsize=6)
                ax.set_xlabel("step")
            row_axes[0].set_ylabel("cumulative prefilled tokens")
            ax = row_axes[-1]
            for i, arm in enumerate(arms):
                for trace in traces:
                    p = pools[(pools["arm"] == arm) & (pools["model"] == model) & (pools["trace"] == trace)]
                    r = rows[(rows["arm"] == arm) & (rows["model"] == model) & (rows["trace"] == trace)]
                    if len(p):
                        ax.scatter(
                            p["rel"].mean(), r["agree"].mean(), color=f"C{i}", marker=markers[trace], s=10
                        )
            ax.set_xlabel("tokens / recompute's")
            ax.set_ylabel("agreement with recompute")
            ax.set_title(f"{model}: cost vs fidelity", fontsize=6)
        handles = [plt.Line2D([], [], color=f"C{i}", label=a) for i, a in enumerate(arms)]
        handles += [
            plt.Line2D([], [], color="grey", marker=markers[t], linestyle="", label=t) for t in traces
        ]
        axes[0][-1].legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=5)
        fig.suptitle(title, fontsize=7)
    return fig


def render(
    rows: pd.DataFrame, group: str, stem: Path, figure_stem: Path, footer: str = ""
) -> tuple[str, list[Path]]:
    rows = agent_rows(rows)
    require_rows(rows, group)
    tag = partial_tag(footer)
    notes = [
        "tokens: prompt tokens each policy prefilled (conditioned runs and canonicals; the prefix and the query, the "
        "same for all, not counted); agreement: the step's answer equals recompute's; fwd / canon / SVD: conditioned "
        "forwards, canonical prefills and layer-channel SVDs per trace; H100 ms: the cost model's FLOPs of those "
        "forwards and the queries (kamera.sweep.cost throughput). Mean [95% cluster-bootstrap CI over pools].",
        *placement_notes(rows),
    ]
    md, paths = table_outputs(
        table(rows),
        stem,
        f"Agent replay ({group}{tag}) — per trace × policy",
        f"Agent traces replayed through each cache policy ({latex_text(group)}{tag}).",
        f"tab:{group}",
        footer,
        notes,
        math=False,
    )
    fig_md = md.replace("**Agent replay", "**Agent replay figure data:", 1)
    _, fig_paths = figure_outputs(
        plot(rows, f"Agent replay ({group}{tag})"), fig_md, figure_stem, footer, "figure"
    )
    return md, [*paths, *fig_paths]


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "agent_tiny",
        lambda exp: render(
            exp.rows,
            exp.name,
            exp.stem("table"),
            suffixed(exp.stem("figure"), "_figure") if exp.out else exp.stem("figure"),
            exp.footer,
        ),
        argv,
    )


if __name__ == "__main__":
    main()
