"""Figure 11: the cost is on memory, and the forming forward amortises.

    python -m experiments.fig11 experiment=fig11_tiny     # make fig11 (SCALE=paper: needs the table4 / table6 rows)

(a) accuracy vs the KV bytes an arm stores or recomputes for B over B's KV page (``bytes_frac``; the
table also gives the bytes in MB), from rows (``bytes``, ``correct``): the figure's own rows plus those
of the experiments its config lists under ``sources`` (at paper scale the Table 4 / Table 6 sweeps; a
source that does not exist or has no stored rows stops the render, naming what to run). One point per
(model, benchmark, subset, arm) at its mean byte fraction and accuracy, so a benchmark's multi-hop items
and its single-hop control are separate points, never pooled; re-prefill (B's whole page, 1.0) is the
ceiling line and blind reuse (no bytes beyond the canonical) the floor line. An (item, arm) read from
two sources counts once.
(b) time to first token vs the reused segment's visual tokens, from the ``ttft`` probe: recompute
(vision encoder + B's prefill in context + the query), the prefill alone, the vision encoder alone,
and reuse (relocate + rank-m patch, then the query) per rank m; (c) cumulative time over N reuse
contexts at the longest segment and the first rank (forming once + N·reuse against N·prefill and
N·recompute), break-even N marked. Timings are medians over the job's items (each item one
measurement of every segment); the device they ran on is in the title: a CPU run is not the
paper's H100 comparison. Writes <paths.figures>/<experiment>.{pdf,png,md}.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, cli, figure_outputs
from experiments.fig12 import (
    EngineRecords,
    clock_lines,
    engine_records,
    panel_lines,
    timing_lines,
    timing_panel,
)
from experiments.formats import document, markdown_rows, partial_tag, row_cell
from experiments.panels import blank, cell, load_sources, of_probe, one_label
from experiments.paper import paper_or
from kamera.diagnostics.records import cumulative

ITEM_ARM = ["model", "dtype", "bench", "subset", "seed", "item_id", "arm", "knobs"]
CEILING, FLOOR = "reprefill", "blind"
N_MAX = 32


# ----- (a) bytes vs accuracy -------------------------------------------------------------------------
def bytes_points(rows: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Per (model, bench, subset, arm), by bytes: n, mean bytes, mean bytes_frac, accuracy and its CI cell (the
    cluster bootstrap: questions on one document resampled together, :func:`experiments.common.row_cell`); and how
    many duplicate (item, arm) rows (the same item read from two sources) were dropped. The subset is a key: a
    multi-hop subset and its single-hop control are different questions (blind reuse is exact on the control)."""
    if rows.empty or "bytes" not in rows.columns:
        return pd.DataFrame(), 0
    unique = rows.drop_duplicates(ITEM_ARM)
    out = []
    for (model, bench, subset, arm), g in unique.groupby(["model", "bench", "subset", "arm"], sort=True):
        out.append(
            {
                "model": model,
                "bench": bench,
                "subset": subset,
                "arm": arm,
                "n": len(g),
                "bytes": g["bytes"].mean(),
                "bytes_frac": g["bytes_frac"].mean(),
                "accuracy": g["correct"].mean(),
                "cell": row_cell(g, "correct"),
            }
        )
    frame = pd.DataFrame(out).sort_values(["model", "bench", "subset", "bytes", "arm"]).reset_index(drop=True)
    return frame, len(rows) - len(unique)


# ----- (b, c) timings --------------------------------------------------------------------------------
def timings(records: pd.DataFrame) -> pd.DataFrame:
    """Median over items per (model, device, n_b, n_visual, rank, quantity); rank None for per-segment times."""
    keys = ["model", "device", "n_b", "n_visual", "rank", "quantity"]
    frame = records.copy()
    if "rank" not in frame.columns:
        frame["rank"] = np.nan
    med = frame.groupby(keys, dropna=False)["value"].median().reset_index()
    med["rank"] = pd.Series([None if pd.isna(r) else int(r) for r in med["rank"]], dtype=object)
    med[["n_b", "n_visual"]] = med[["n_b", "n_visual"]].astype(int)
    return med


def amortisation(t: pd.DataFrame) -> pd.DataFrame:
    """:func:`kamera.diagnostics.ttft.cumulative` per (model, device): cumulative times and break-even N."""
    out = []
    for (model, device), g in t.groupby(["model", "device"], sort=True):
        for r in cumulative(g.to_dict("records"), n_max=N_MAX):
            out.append({"model": model, "device": device, **r})
    return pd.DataFrame(out)


def device_note(t: pd.DataFrame) -> str:
    """'CPU: not the paper's H100 comparison' when any timing ran on a CPU, else the devices."""
    devices = sorted(set(t["device"]))
    if any(not d.startswith("cuda") for d in devices):
        return "timed on CPU: not the paper's H100 comparison"
    return "timed on " + "/".join(devices)


# ----- drawing -------------------------------------------------------------------------------------
def plot(points: pd.DataFrame, t: pd.DataFrame, cum: pd.DataFrame, title: str) -> plt.Figure:
    """Fig. 11's three panels side by side: (a) bytes vs accuracy, (b) TTFT, (c) amortisation."""
    with plt.style.context(str(STYLE)):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(7.0, 2.6))
        bytes_axes(a, points)
        a.set_title("(a) bytes vs accuracy (-- re-prefill, : blind)", fontsize=6.5)
        if t.empty:
            blank(b, "no ttft records")
            blank(c, "no ttft records")
        else:
            ttft_axes(b, t)
            amortisation_axes(c, cum)
        b.set_title(f"(b) TTFT ({device_note(t) if not t.empty else 'no timings'})", fontsize=6)
        c.set_title("(c) amortisation", fontsize=6.5)
        fig.suptitle(title)
        fig.tight_layout()
    return fig


def bytes_axes(ax: plt.Axes, points: pd.DataFrame) -> None:
    """Panel (a): one colour per (model, bench, subset), its arms as labelled points at (byte fraction, accuracy),
    re-prefill dashed across as the ceiling and blind reuse dotted as the floor."""
    if points.empty:
        blank(ax, "no rows with bytes")
        return
    for i, ((model, bench, subset), g) in enumerate(points.groupby(["model", "bench", "subset"], sort=True)):
        colour = f"C{i}"
        g = g.set_index("arm")
        for arm, line in ((CEILING, "--"), (FLOOR, ":")):
            if arm in g.index:
                ax.axhline(g.at[arm, "accuracy"], color=colour, linestyle=line, linewidth=0.7)
        rest = g.drop(index=[FLOOR], errors="ignore")
        ax.scatter(rest["bytes_frac"], rest["accuracy"], color=colour, s=8, label=f"{model} · {bench} · {subset}")
        for arm, r in rest.iterrows():
            ax.annotate(arm, (r["bytes_frac"], r["accuracy"]), fontsize=4, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel("KV bytes stored or recomputed for B / B's KV page")
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=4.5, loc="center right")


def ttft_axes(ax: plt.Axes, t: pd.DataFrame) -> None:
    """Panel (b), log-log: per (model, device) the per-segment times and reuse per rank vs segment length."""
    for i, ((model, device), g) in enumerate(t.groupby(["model", "device"], sort=True)):
        segment_lines(ax, g, f"C{i}", f"{model} ({device})")
        reuse_lines(ax, g, f"C{i}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted(t["n_visual"].unique())
    ax.set_xticks(sizes, [str(x) for x in sizes])
    ax.minorticks_off()
    ax.set_xlabel("segment length (visual tokens)")
    ax.set_ylabel("TTFT (ms)")
    ax.legend(fontsize=4, loc="upper left")


def segment_lines(ax: plt.Axes, g: pd.DataFrame, colour: str, label: str) -> None:
    """Panel (b)'s lines of one (model, device) that no rank changes: recompute, prefill alone, encoder alone."""
    per = g[g["rank"].isna()].pivot(index="n_visual", columns="quantity", values="value")
    ax.plot(
        per.index,
        per["recompute_ms"],
        color=colour,
        linestyle="--",
        marker="s",
        markersize=2,
        label=f"{label}: recompute",
    )
    ax.plot(per.index, per["prefill_ms"], color=colour, linestyle=":", linewidth=0.8, label="prefill only")
    ax.plot(per.index, per["vision_ms"], color=colour, linestyle=(0, (1, 3)), linewidth=0.8, label="vision encoder")


def reuse_lines(ax: plt.Axes, g: pd.DataFrame, colour: str) -> None:
    """Panel (b)'s reuse line per rank of one (model, device), fading with the rank; the first rank's points carry
    their speed-up over the prefill."""
    ranks = sorted(r for r in g["rank"].dropna().unique())
    for j, m in enumerate(ranks):
        ru = g[g["rank"] == m].pivot(index="n_visual", columns="quantity", values="value")
        ax.plot(
            ru.index,
            ru["reuse_ms"],
            color=colour,
            marker="o",
            markersize=2,
            alpha=1 - 0.3 * j,
            label=f"reuse, rank {m}",
        )
        if j == 0:
            for x, y, s in zip(ru.index, ru["reuse_ms"], ru["speedup_prefill"], strict=True):
                ax.annotate(f"{s:.1f}×", (x, y), fontsize=4, xytext=(0, -7), textcoords="offset points", ha="center")


def amortisation_axes(ax: plt.Axes, cum: pd.DataFrame) -> None:
    """Panel (c): per (model, device), at its longest segment and first rank, cumulative time over N reuse contexts
    (forming once + N·reuse against N·prefill and N·recompute), the break-even N over the prefill marked."""
    for i, ((model, device), g) in enumerate(cum.groupby(["model", "device"], sort=True)):
        colour = f"C{i}"
        n_b, rank = g["n_b"].max(), min(g["rank"])
        sel = g[(g["n_b"] == n_b) & (g["rank"] == rank)]
        curve = sel[sel["n_reuse"].notna()].pivot(index="n_reuse", columns="quantity", values="value") / 1e3
        ax.plot(curve.index, curve["kamera_ms"], color=colour, label=f"{model} ({device}): Kamera (r{rank}, n_B {n_b})")
        ax.plot(curve.index, curve["prefill_ms"], color=colour, linestyle=":", label="prefill every reuse")
        ax.plot(curve.index, curve["recompute_ms"], color=colour, linestyle="--", label="recompute every reuse")
        star = sel[sel["quantity"] == "break_even_prefill"]["value"].iloc[0]
        if not math.isnan(star):
            ax.axvline(star, color=colour, linestyle=(0, (1, 2)), linewidth=0.7)
            ax.annotate(
                f"N* = {star:.0f}",
                (star, 0.55 - 0.08 * i),
                xycoords=("data", "axes fraction"),
                fontsize=4.5,
                xytext=(2, 0),
                textcoords="offset points",
            )
    ax.set_xlabel("number of reuse contexts N")
    ax.set_ylabel("cumulative time (s)")
    ax.legend(fontsize=4, loc="upper left")


# ----- markdown ------------------------------------------------------------------------------------
BYTES_HEADER = ["model", "bench", "subset", "arm", "n", "MB", "of B's page", "accuracy [95% CI]", "paper"]
TTFT_HEADER = [
    "model",
    "device",
    "visual",
    "n_B",
    "vision",
    "prefill",
    "form",
    "m",
    "apply",
    "reuse",
    "×prefill",
    "×recomp",
    "N* prefill",
    "N* recomp",
    "paper ×prefill",
]


def to_markdown(
    points: pd.DataFrame, dropped: int, t: pd.DataFrame, cum: pd.DataFrame, title: str, sources: list[str], paper: dict
) -> list[str]:
    """Fig. 11's tables: (a) one row per point, (b, c) one per (segment, rank), then the paper's note."""
    src = f" plus source experiment(s) {', '.join(sources)}" if sources else ""
    bytes_caption = (
        "(a) accuracy vs the KV bytes stored or recomputed for B (MB, and over B's KV page), "
        f"per subset (rows of this experiment{src})"
    )
    ttft_caption = (
        f"(b, c) TTFT in ms, median over items ({device_note(t) if not t.empty else 'no timings'}); "
        "×prefill = prefill / reuse, ×recomp = (vision + prefill) / reuse; N* = break-even reuses"
    )
    return [
        f"**{title}**",
        *panel_lines(bytes_caption, bytes_table(points, dropped, paper), "no rows with bytes"),
        *panel_lines(ttft_caption, ttft_table(t, cum, paper), "no ttft records"),
        "",
        paper["note"],
    ]


def bytes_table(points: pd.DataFrame, dropped: int, paper: dict) -> list[str]:
    """Panel (a)'s table, with the count of (item, arm) rows two sources shared; none without points."""
    if points.empty:
        return []
    body = [
        [
            r.model,
            r.bench,
            str(r.subset),
            r.arm,
            str(r.n),
            cell(r.bytes / 2**20, ".4g"),
            cell(r.bytes_frac, ".3f"),
            r.cell,
            paper.get("bytes", {}).get(r.arm, "–") if r.model == paper.get("model") else "–",
        ]
        for r in points.itertuples(index=False)
    ]
    note = [f"\n{dropped} (item, arm) row(s) present in two sources counted once"] if dropped else []
    return [*markdown_rows(BYTES_HEADER, body), *note]


def ttft_table(t: pd.DataFrame, cum: pd.DataFrame, paper: dict) -> list[str]:
    """Panels (b, c)'s table: per (model, device, n_B, segment) and rank, the per-segment times, the reuse, its
    speed-ups and break-even reuses; none without timings."""
    if t.empty:
        return []
    # dropna=False: a point that never breaks even (reuse no faster than prefill, as on a loaded CPU) is NaN, kept
    even = cum[cum["n_reuse"].isna()].pivot_table(
        index=["model", "device", "n_b", "rank"], columns="quantity", values="value", dropna=False
    )
    body = []
    for (model, device, n_b, n_vis), g in t.groupby(["model", "device", "n_b", "n_visual"], sort=True):
        per = g[g["rank"].isna()].set_index("quantity")["value"]
        for m in sorted(g["rank"].dropna().unique()):
            r = g[g["rank"] == m].set_index("quantity")["value"]
            key = (model, device, n_b, m)
            be = even.loc[key] if key in even.index else pd.Series(math.nan, index=even.columns)
            body.append(
                [
                    model,
                    device,
                    str(n_vis),
                    str(n_b),
                    cell(per["vision_ms"], ".4g"),
                    cell(per["prefill_ms"], ".4g"),
                    cell(per["form_ms"], ".4g"),
                    str(int(m)),
                    cell(r["apply_ms"], ".3g"),
                    cell(r["reuse_ms"], ".4g"),
                    cell(r["speedup_prefill"], ".2f"),
                    cell(r["speedup_recompute"], ".2f"),
                    cell(be["break_even_prefill"], ".0f"),
                    cell(be["break_even_recompute"], ".0f"),
                    cell(paper.get("speedup", {}).get(n_vis), ".1f"),
                ]
            )
    return markdown_rows(TTFT_HEADER, body)


def render(
    rows: pd.DataFrame,
    probes: pd.DataFrame,
    group: str,
    stem: Path,
    footer: str = "",
    sources: list[str] | None = None,
    paper: dict | None = None,
    engine: EngineRecords | None = None,
) -> tuple[str, list[Path]]:
    points, dropped = bytes_points(rows)
    records = one_label(of_probe(probes, "ttft"), "ttft")
    t = timings(records) if not records.empty else pd.DataFrame()
    cum = amortisation(t) if not t.empty else pd.DataFrame()
    if points.empty and t.empty:
        raise SystemExit(f"{group} has no rows with bytes and no ttft records")
    title = f"Fig. 11 ({group}{partial_tag(footer)})"
    lines = to_markdown(points, dropped, t, cum, title, sources or [], paper_or(paper, "fig11"))
    if engine is not None and len(engine.timing):  # the live-engine jobs' TTFT with the splice: a second source for (b)
        lines += [*timing_lines(timing_panel(engine.timing)), *clock_lines(engine.clock), "", engine.footer]
    md = document(lines, footer)
    return figure_outputs(plot(points, t, cum, title), md, stem, footer, place="figure")


def main(argv: list[str] | None = None) -> None:
    def draw(exp):
        names = list(exp.jobs[0].cfg.get("sources") or [])
        src = load_sources(exp, names, argv)
        rows = (
            pd.concat([f for f in (exp.rows, src.rows) if not f.empty], ignore_index=True)
            if not (exp.rows.empty and src.rows.empty)
            else pd.DataFrame()
        )
        footer = exp.footer + (f"; {src.footer}" if src.footer else "")
        return render(rows, exp.probes, exp.name, exp.stem("figure"), footer, names, exp.paper, engine_records(exp))

    cli(__doc__, "fig11", draw, argv)


if __name__ == "__main__":
    main()
