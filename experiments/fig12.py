"""Figure 12, measured in the harness: position is fixed by R(δ), conditioning by the patch, and reuse
matches the re-prefill answers.

    python -m experiments.fig12 experiment=fig12_tiny   # make fig12 (SCALE=paper: 4 backbones, Video-MME, EgoSchema)

(a) per backbone, next-token KL to re-prefill of the chunk spliced without re-rotation
(``unrotated``), with R(δ) only (``blind``) and with rank-8 / rank-64 patches, from rows
(:func:`kamera.diagnostics.fidelity.kl_by_arm`: mean KL drawn, median and argmax flips in the table), with the
dtype's KL floor dotted across each backbone (the full-rank patch in the model's dtype, ``patch_full``: bf16 at paper
scale, the floor experiments/bf16_floor.py tabulates);
(b) the relative error of relocated keys against keys prefilled at the new position, vs the
distance moved, per RoPE scheme and dtype (``relocation`` probe; layer 0, which isolates
relocation, median over items; the table adds the worst layer), with the bf16 storage floor of
the float32 runs dashed; (c) multiple-choice accuracy of splice + patch at ranks 8, 64, 256 against
re-prefill, and each rank's per-item answer agreement with re-prefill (markers, right axis), from
the multiple-choice rows (:func:`kamera.diagnostics.fidelity.mc_agreement`).

The paper measures these inside SGLang's FlashAttention-3 kernel (a live engine); here they are the
harness's own splice. Where a model has rows in several dtypes its label carries the dtype.
Writes <paths.figures>/<experiment>.{pdf,png,md}.

When the experiment names its live-engine jobs (``engine_experiment``: fig12_tiny's is ``fig12_engine_tiny``, which
``make fig12 ENGINE=vllm`` runs in the engine venv; docs/engine.md) and any of them has run, the render adds the
engine panels from those jobs, read like every job's (incomplete or mixed-version jobs are refused alike): the same
items spliced through vLLM's KV connector and through kamera's own splice on the same weights, (a) KL per arm, (b)
the fraction of B's K / V within one bf16 ULP of the re-prefill's, the maximum bf16 ULP distance per element (the
bars: the paper's "within one bf16 ULP", docs/metrics.md) and per vector, and the per-vector maximum per layer and
channel, (c) answers and agreement with re-prefill, and the time to first token with and without the splice and the
connector's time per claimed token (with the fair clock's table when ``make engine-clock`` has written it); written
to <experiment>_engine.{pdf,png,md} (and printed after the main table). Rendering the engine experiment itself
(``make render EXP=fig12_engine_tiny``) draws the engine panels alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, Experiment, cli, companion, figure_outputs, suffixed
from experiments.formats import document, markdown_rows, partial_tag
from experiments.panels import blank, cell, of_probe, one_label
from experiments.paper import paper_or
from kamera.diagnostics.fidelity import FIG12A_ARMS, FIG12C_ARMS, REFERENCE, kl_by_arm, mc_agreement

FLOOR_LAYER = 0
KL_FLOOR_ARM = "patch_full"  # the full-rank patch in the model's dtype: its KL is what the dtype's rounding leaves
ENGINE_EXPERIMENT = "engine_experiment"  # the config key naming an experiment's live-engine jobs
TIMING = "timing"  # the probe label of an engine=vllm job's timing records (kamera.engine.shape)
ENGINE_ARMS = tuple(dict.fromkeys([REFERENCE, *FIG12A_ARMS, *FIG12C_ARMS, KL_FLOOR_ARM]))  # the engine panels' order
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}  # an engine row's source → the engine a title names
CLOCK = "engine_clock"  # <results root>/engine_clock/clock.md: the fair clock's table (make engine-clock)


def labelled(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with ``model`` as the figure labels it: ``model · dtype`` where a model has several dtypes."""
    if rows.empty:
        return rows
    several = rows.groupby("model")["dtype"].nunique() > 1
    out = rows.copy()
    out["model"] = [f"{m} · {d}" if several[m] else m for m, d in zip(rows["model"], rows["dtype"], strict=True)]
    return out


def kl_panel(rows: pd.DataFrame) -> pd.DataFrame:
    """Fig. 12(a): wide per (model, arm): n, kl_mean, kl_median, argmax_flip (empty without those arms)."""
    arms = [a for a in FIG12A_ARMS if not rows.empty and a in set(rows["arm"])]
    if not arms:
        return pd.DataFrame()
    long = pd.DataFrame(kl_by_arm(rows, arms))
    wide = long.pivot_table(index=["model", "arm", "n"], columns="quantity", values="value").reset_index()
    return in_order(wide, FIG12A_ARMS)


def agreement_panel(rows: pd.DataFrame) -> pd.DataFrame:
    """Fig. 12(c): wide per (model, bench, arm): accuracy, agreement (and its n), chance; multiple-choice rows only."""
    if rows.empty:
        return pd.DataFrame()
    mc = rows[rows["n_choices"] > 0]
    arms = [a for a in FIG12C_ARMS if a in set(mc["arm"])]
    if not arms or REFERENCE not in set(mc["arm"]):
        return pd.DataFrame()
    long = pd.DataFrame(mc_agreement(mc, arms, REFERENCE))
    wide = long.pivot_table(index=["model", "bench", "arm"], columns="quantity", values="value").reset_index()
    n = long[long["quantity"] == "accuracy"].set_index(["model", "bench", "arm"])["n"]
    wide["n"] = [int(n[k]) for k in zip(wide["model"], wide["bench"], wide["arm"], strict=True)]
    chance = mc.groupby(["model", "bench"])["n_choices"].apply(lambda c: float((1.0 / c).mean()))
    wide["chance"] = [chance[(m, b)] for m, b in zip(wide["model"], wide["bench"], strict=True)]
    if "agreement" not in wide.columns:
        wide["agreement"] = np.nan
    return in_order(wide, (REFERENCE, *FIG12C_ARMS))


def in_order(frame: pd.DataFrame, arms: tuple[str, ...]) -> pd.DataFrame:
    """Rows sorted by model (and bench), then in the figure's arm order."""
    keys = [k for k in ("model", "bench") if k in frame.columns]
    frame = frame.assign(order=frame["arm"].map(arms.index))
    return frame.sort_values([*keys, "order"]).drop(columns="order").reset_index(drop=True)


def relocation_panel(records: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Fig. 12(b): per (model, dtype, scheme, distance): median over items of layer 0's rel_err and of the
    worst layer's; and the bf16 floor (median over the float32 records' layer 0; NaN without float32 runs)."""
    if records.empty:
        return pd.DataFrame(), float("nan")
    err = records[records["quantity"] == "rel_err"]
    keys = ["model", "dtype", "scheme", "distance"]
    first = err[err["layer"] == FLOOR_LAYER].groupby([*keys, "item_id"])["value"].max()
    worst = err.groupby([*keys, "item_id"])["value"].max()
    out = pd.DataFrame(
        {
            "layer0": first.groupby(level=keys).median(),
            "worst_layer": worst.groupby(level=keys).median(),
            "items": worst.groupby(level=keys).size(),
        }
    ).reset_index()
    floor = records[(records["quantity"] == "bf16_floor") & (records["layer"] == FLOOR_LAYER)]["value"]
    return out.sort_values(keys).reset_index(drop=True), float(floor.median()) if len(floor) else float("nan")


def kl_floor(rows: pd.DataFrame) -> pd.Series:
    """Fig. 12(a)'s floor line per model label: the median KL to re-prefill of the full-rank patch in the model's dtype
    (``patch_full``), the KL rounding alone leaves (bf16 at paper scale; experiments/bf16_floor.py's floor); empty
    without those rows."""
    if rows.empty:
        return pd.Series(dtype=float)
    return rows[rows["arm"] == KL_FLOOR_ARM].groupby("model")["kl"].median()


NO_KL = f"no rows of {', '.join(FIG12A_ARMS)}"
NO_AGREEMENT = f"no multiple-choice rows of {REFERENCE} and {', '.join(FIG12C_ARMS)}"
AGREEMENT_CAPTION = "(c) multiple-choice accuracy and per-item agreement with re-prefill"


def plot(
    kl: pd.DataFrame,
    reloc: pd.DataFrame,
    floor: float,
    agree: pd.DataFrame,
    title: str,
    kl_floors: pd.Series | None = None,
) -> plt.Figure:
    """Fig. 12's three panels side by side: (a) KL per backbone, (b) relocation error, (c) reuse vs the ceiling."""
    with plt.style.context(str(STYLE)):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(7.0, 3.4))
        kl_axes(a, kl, pd.Series(dtype=float) if kl_floors is None else kl_floors)
        a.set_title("(a) KL per backbone")
        relocation_axes(b, reloc, floor)
        b.set_title("(b) relocation error")
        agreement_axes(c, agree)
        c.set_title("(c) reuse vs the ceiling")
        fig.suptitle(title)
        fig.subplots_adjust(left=0.08, right=0.92, top=0.84, bottom=0.42, wspace=0.55)
    return fig


def kl_axes(ax: plt.Axes, kl: pd.DataFrame, floors: pd.Series) -> None:
    """Panel (a): per backbone one bar per arm (mean KL, log scale), the dtype's floor dotted across its bars."""
    if kl.empty:
        blank(ax, NO_KL)
        return
    models = sorted(kl["model"].unique())
    arms = [x for x in FIG12A_ARMS if x in set(kl["arm"])]
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        v = kl[kl["arm"] == arm].set_index("model")["kl_mean"]
        ax.bar(np.arange(len(models)) + i * width, [max(v.get(m, np.nan), 1e-12) for m in models], width, label=arm)
    floor_of = [max(float(floors[m]), 1e-12) if m in floors.index else None for m in models]
    group_lines(ax, floor_of, width, "dtype floor (full-rank patch)", colors="k", linestyles=":", linewidth=0.9)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(models)) + 0.4 - width / 2, models, rotation=30, ha="right", fontsize=4.5)
    ax.set_ylabel("KL to re-prefill (mean)")
    ax.legend(fontsize=4.5, loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=2)


def group_lines(ax: plt.Axes, ys: list[float | None], width: float, label: str, **style) -> None:
    """A segment at ``ys[j]`` across group j's bars (none where None), labelled once, at group 0."""
    for j, y in enumerate(ys):
        if y is not None:
            ax.hlines(y, j - width / 2, j + 0.8 - width / 2, label=label if j == 0 else None, **style)


def relocation_axes(ax: plt.Axes, reloc: pd.DataFrame, floor: float) -> None:
    """Panel (b), log-log: layer 0's relative error vs the distance moved, a colour per model (its RoPE scheme in the
    legend) and a line style per dtype, the bf16 floor dotted across."""
    if reloc.empty:
        blank(ax, "no relocation records")
        return
    colour = {m: f"C{i}" for i, m in enumerate(sorted(reloc["model"].unique()))}
    dashes = {d: style for d, style in zip(sorted(reloc["dtype"].unique()), ("--", "-", "-."), strict=False)}
    for (model, dtype), g in reloc.groupby(["model", "dtype"], sort=True):
        ax.plot(
            g["distance"],
            g["layer0"].clip(lower=1e-12),
            marker="o",
            markersize=2,
            color=colour[model],
            linestyle=dashes[dtype],
        )
    schemes = reloc.groupby("model")["scheme"].first()
    handles = [plt.Line2D([], [], color=colour[m], label=f"{m} ({schemes[m]})") for m in colour]
    handles += [plt.Line2D([], [], color="0.3", linestyle=st, label=d) for d, st in dashes.items()]
    if not np.isnan(floor):
        ax.axhline(floor, color="k", linestyle=":", linewidth=0.9)
        handles.append(plt.Line2D([], [], color="k", linestyle=":", label="bf16 floor"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("relocation distance δ (positions)")
    ax.set_ylabel("rel. error vs prefill at δ (layer 0)")
    ax.legend(handles=handles, fontsize=4.5, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)


def agreement_axes(ax: plt.Axes, agree: pd.DataFrame) -> None:
    """Panel (c): per (model, bench) one accuracy bar per arm, chance dotted across, and on a right axis each reuse
    arm's agreement with re-prefill (markers)."""
    if agree.empty:
        blank(ax, NO_AGREEMENT)
        return
    groups = sorted({(m, x) for m, x in zip(agree["model"], agree["bench"], strict=True)})
    arms = [REFERENCE, *[x for x in FIG12C_ARMS if x in set(agree["arm"])]]
    width = 0.8 / len(arms)
    right = ax.twinx()
    for i, arm in enumerate(arms):
        g = agree[agree["arm"] == arm].set_index(["model", "bench"])
        xs = np.arange(len(groups)) + i * width
        ax.bar(xs, [g["accuracy"].get(k, np.nan) for k in groups], width, label=arm)
        if arm != REFERENCE:
            right.plot(xs, [100 * g["agreement"].get(k, np.nan) for k in groups], "kv", markersize=2.5)
    chance = agree.groupby(["model", "bench"])["chance"].first()
    group_lines(ax, [chance[k] for k in groups], width, "chance", color="0.3", linestyle=":", linewidth=0.8)
    labels = [f"{m} · {x}" for m, x in groups]
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, labels, rotation=30, ha="right", fontsize=4.5)
    ax.set_ylim(0, 1)
    ax.set_ylabel("MC accuracy")
    right.set_ylim(0, 105)
    right.set_ylabel("agreement with re-prefill (%, ▼)")
    right.grid(False)
    ax.legend(fontsize=4.5, loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=3)


def panel_lines(caption: str, table: list[str], empty: str = "") -> list[str]:
    """One panel's markdown as Figs. 11 and 12 print each: its caption in italics between blank lines, then its table
    lines, or ``empty`` (what is missing) when it has none."""
    return ["", f"*{caption}*", "", *(table or [empty])]


def to_markdown(
    kl: pd.DataFrame,
    reloc: pd.DataFrame,
    floor: float,
    agree: pd.DataFrame,
    title: str,
    paper: dict,
    kl_floors: pd.Series | None = None,
) -> list[str]:
    """Fig. 12's tables, one per panel, then the paper's note."""
    floors = pd.Series(dtype=float) if kl_floors is None else kl_floors
    kl_caption = (
        "(a) next-token KL to re-prefill; dtype floor = median KL of the full-rank patch in the model's dtype "
        "(what rounding alone leaves: bf16 at paper scale), the dotted line"
    )
    reloc_caption = f"(b) relative error of relocated keys (median over items); bf16 floor {cell(floor, '.2e')}"
    return [
        f"**{title}** — the harness's own splice (the paper measures inside SGLang)",
        *panel_lines(kl_caption, kl_table(kl, floors, paper), NO_KL),
        *panel_lines(reloc_caption, relocation_table(reloc), "no relocation records"),
        *panel_lines(AGREEMENT_CAPTION, agreement_table(agree, paper), NO_AGREEMENT),
        "",
        paper["note"],
    ]


def kl_table(kl: pd.DataFrame, floors: pd.Series, paper: dict) -> list[str]:
    """Panel (a)'s table with the paper's KL per arm; none without KL rows."""
    if kl.empty:
        return []
    body = [[*kl_cells(r, floors), paper.get("kl", {}).get(r.arm, "–")] for r in kl.itertuples(index=False)]
    return markdown_rows(["model", "arm", "n", "KL mean", "KL median", "argmax flips", "dtype floor", "paper KL"], body)


def relocation_table(reloc: pd.DataFrame) -> list[str]:
    """Panel (b)'s table: layer 0's and the worst layer's error per (model, dtype, distance); none without records."""
    if reloc.empty:
        return []
    body = [
        [
            r.model,
            r.scheme,
            r.dtype,
            str(int(r.distance)),
            str(int(r.items)),
            cell(r.layer0, ".2e"),
            cell(r.worst_layer, ".2e"),
        ]
        for r in reloc.itertuples(index=False)
    ]
    return markdown_rows(["model", "scheme", "dtype", "δ", "items", "layer 0", "worst layer"], body)


def agreement_table(agree: pd.DataFrame, paper: dict) -> list[str]:
    """Panel (c)'s table with the paper's agreement for the reuse arms; none without multiple-choice rows."""
    if agree.empty:
        return []
    body = [
        [
            r.model,
            r.bench,
            r.arm,
            str(r.n),
            cell(r.accuracy, ".3f"),
            cell(100 * r.agreement, ".1f"),
            cell(r.chance, ".2f"),
            paper.get("agreement", "–") if r.arm != REFERENCE else "–",
        ]
        for r in agree.itertuples(index=False)
    ]
    return markdown_rows(["model", "bench", "arm", "n", "accuracy", "agreement %", "chance", "paper agreement"], body)


# ----- the live-engine panels ----------------------------------------------------------------------------
@dataclass
class EngineRecords:
    """An experiment's live-engine jobs as the panels read them: arm rows, vLLM's timing records, their footer and
    where the fair clock's table is (when ``make engine-clock`` has run)."""

    rows: pd.DataFrame
    timing: pd.DataFrame
    footer: str
    clock: Path


def engine_records(exp: Experiment) -> EngineRecords | None:
    """The live-engine jobs of ``exp``: the experiment itself when it is an engine experiment (its jobs set
    ``engine``), else the one its ``engine_experiment`` names (:func:`experiments.common.companion`; None when it
    names none or none of its jobs has run)."""
    cfg = exp.jobs[0].cfg
    eng = exp if cfg.get("engine") else companion(exp, ENGINE_EXPERIMENT)
    if eng is None:
        return None
    probes = eng.probes
    timing = probes[probes["probe"] == TIMING] if len(probes) else pd.DataFrame()
    libraries = dict.fromkeys(
        ", ".join(f"{d} {v}" for d, v in ((j.shard.meta().get("identity") or {}).get("libraries") or {}).items())
        for j in eng.jobs
        if j.shard is not None
    )
    footer = f"engine jobs {eng.name}: {eng.footer}; engine libraries {' / '.join(x for x in libraries if x) or '–'}"
    from kamera.job import results_root

    return EngineRecords(eng.rows, timing, footer, results_root(eng.jobs[0].cfg) / CLOCK / "clock.md")


def engine_labelled(rows: pd.DataFrame) -> pd.DataFrame:
    """Engine rows with ``model`` as the panels label them: ``model · dtype · source``."""
    return rows.assign(
        model=[f"{m} · {d} · {s}" for m, d, s in zip(rows["model"], rows["dtype"], rows["source"], strict=True)]
    )


def ulp_panel(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model label, arm): mean over items of the fraction of B's K / V within one (and four) bf16 ULPs of the
    re-prefill's, every layer, and within one at layer 0; and the maximum over items and elements of the ULP distance
    on both scales (docs/metrics.md): per element (each at its own value; the panel's bars) and per vector (at each
    token-head vector's largest magnitude), every layer and layer 0."""
    g = rows.groupby(["model", "arm"], sort=False)
    out = pd.DataFrame(
        {
            "n": g.size(),
            "le1": g["ulp_le1"].mean(),
            "le1_l0": g["ulp_le1_l0"].mean(),
            "le4": g["ulp_le4"].mean(),
            "max_element": g["ulp_max_element"].max(),
            "max_element_l0": g["ulp_max_element_l0"].max(),
            "max": g["ulp_max"].max(),
            "max_l0": g["ulp_max_l0"].max(),
        }
    ).reset_index()
    return in_order(out, ENGINE_ARMS)


def ulp_max_panel(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model label, arm, channel): the maximum bf16 ULP distance over items at each layer (``ulp_max_by_layer``:
    channel name → one maximum per layer), as a list in layer order."""
    out = []
    for (model, arm), g in rows.groupby(["model", "arm"], sort=False):
        per_item = [json.loads(x) for x in g["ulp_max_by_layer"]]
        for channel in per_item[0]:
            out.append(
                {
                    "model": model,
                    "arm": arm,
                    "channel": channel,
                    "max_by_layer": [max(v) for v in zip(*(d[channel] for d in per_item), strict=True)],
                }
            )
    frame = pd.DataFrame(out)
    return in_order(frame, ENGINE_ARMS) if out else frame


def kl_cells(r, floors: pd.Series) -> list[str]:
    """Panel (a)'s cells of one (model, arm) row: model, arm, n, KL mean and median, argmax flips, the dtype floor."""
    return [r.model, r.arm, str(int(r.n)), cell(r.kl_mean, ".2e"), cell(r.kl_median, ".2e"),
            cell(r.argmax_flip, ".2f"), cell(floors.get(r.model, float("nan")), ".2e")]


def timing_panel(timing: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dtype): median over items of the time to first token of vLLM's prefill and of the spliced request,
    and of the connector's compose and write time per claimed token (µs)."""
    g = timing.groupby(["model", "dtype"], sort=True)
    per_token = timing.assign(
        compose_us=1e6 * timing["compose_s"] / timing["claimed_tokens"],
        write_us=1e6 * timing["write_s"] / timing["claimed_tokens"],
    ).groupby(["model", "dtype"], sort=True)
    return pd.DataFrame(
        {
            "n": g.size(),
            "prompt": g["prompt_tokens"].first(),
            "claimed": g["claimed_tokens"].first(),
            "ttft_prefill_ms": 1e3 * g["ttft_prefill_s"].median(),
            "ttft_splice_ms": 1e3 * g["ttft_splice_s"].median(),
            "compose_us": per_token["compose_us"].median(),
            "write_us": per_token["write_us"].median(),
        }
    ).reset_index()


def engine_panels(records: EngineRecords) -> dict[str, pd.DataFrame]:
    """The engine panels from an experiment's live-engine jobs."""
    rows = engine_labelled(records.rows)
    return {
        "kl": kl_panel(rows),
        "floor": kl_floor(rows),
        "ulp": ulp_panel(rows),
        "ulp_max": ulp_max_panel(rows),
        "agree": agreement_panel(rows),
        "timing": timing_panel(records.timing) if len(records.timing) else pd.DataFrame(),
    }


ENGINE_LABEL = "model · dtype · source"
ULP_HEADER = [
    ENGINE_LABEL,
    "arm",
    "n",
    "≤ 1 ULP, all layers",
    "≤ 1 ULP, layer 0",
    "≤ 4 ULP, all layers",
    "max ULP per element, all layers",
    "max ULP per element, layer 0",
    "max ULP per vector, all layers",
    "max ULP per vector, layer 0",
]
TIMING_HEADER = [
    "model",
    "dtype",
    "items",
    "prompt",
    "claimed",
    "TTFT prefill ms",
    "TTFT splice ms",
    "compose µs / token",
    "write µs / token",
]


def engine_markdown(panels: dict[str, pd.DataFrame], records: EngineRecords) -> list[str]:
    """The engine panels' tables: (a) KL, (b) ULP distances, (c) answers, then the timing and the fair clock."""
    kl_caption = (
        "(a) next-token KL to re-prefill; dtype floor = median KL of the full-rank patch (``patch_full``) in the "
        "model's dtype through the same path, the dotted line"
    )
    kl_header = [ENGINE_LABEL, "arm", "n", "KL mean", "KL median", "argmax flips", "dtype floor"]
    kl = [kl_cells(r, panels["floor"]) for r in panels["kl"].itertuples(index=False)]
    agree_header = [ENGINE_LABEL, "arm", "n", "accuracy", "agreement %", "chance"]
    agree = [
        [r.model, r.arm, str(r.n), cell(r.accuracy, ".3f"), cell(100 * r.agreement, ".1f"), cell(r.chance, ".2f")]
        for r in panels["agree"].itertuples(index=False)
    ]
    timing = timing_lines(panels["timing"]) if len(panels["timing"]) else []
    return [
        "",
        f"**Fig. 12 inside {engines_of(records.rows)}** — the chunk spliced through the engine (``vllm``: kamera's "
        "KV connector; ``sglang``: kamera's radix cache) beside kamera's own splice on the same weights and items "
        "(``own``)",
        *panel_lines(kl_caption, markdown_rows(kl_header, kl)),
        *ulp_lines(panels["ulp"], panels["ulp_max"]),
        *panel_lines(AGREEMENT_CAPTION, markdown_rows(agree_header, agree)),
        *timing,
        *clock_lines(records.clock),
    ]


def ulp_lines(ulp: pd.DataFrame, ulp_max: pd.DataFrame) -> list[str]:
    """Engine panel (b)'s tables: the ULP shares and maxima per (label, arm) and, where recorded, the per-vector
    maximum per layer and channel."""
    caption = (
        "(b) B's K / V against the re-prefill's, in bf16 ULPs: the share within one ULP of each element's "
        "own value (mean over items), and the largest distance (max over items) on both scales: per element, at "
        "each element's own value (the bars), and per vector, at each token-head vector's largest magnitude"
    )
    body = [
        [
            r.model,
            r.arm,
            str(int(r.n)),
            cell(r.le1, ".4f"),
            cell(r.le1_l0, ".4f"),
            cell(r.le4, ".4f"),
            cell(r.max_element, ".3g"),
            cell(r.max_element_l0, ".3g"),
            cell(r.max, ".3g"),
            cell(r.max_l0, ".3g"),
        ]
        for r in ulp.itertuples(index=False)
    ]
    lines = panel_lines(caption, markdown_rows(ULP_HEADER, body))
    if not len(ulp_max):
        return lines
    by_layer = [
        [r.model, r.arm, r.channel, " · ".join(cell(v, ".3g") for v in r.max_by_layer)]
        for r in ulp_max.itertuples(index=False)
    ]
    by_layer_caption = (
        "(b) the maximum bf16 ULP distance per vector, per layer and channel (max over items; layers 0, 1, …)"
    )
    header = [ENGINE_LABEL, "arm", "channel", "max ULP by layer"]
    return lines + panel_lines(by_layer_caption, markdown_rows(header, by_layer))


def clock_lines(path: Path) -> list[str]:
    """The fair clock's table (``make engine-clock`` writes <results root>/engine_clock/clock.md: full prefill, prefix
    hit and splice per chunk length, interleaved), when it has run; Fig. 11(b)'s engine source beside the per-item
    TTFTs."""
    if not path.is_file():
        return []
    title, *rest = path.read_text().strip().splitlines()
    return ["", f"*{title.lstrip('# ')} ({path})*", *rest]


def timing_lines(timing: pd.DataFrame) -> list[str]:
    """The engine's timing table (:func:`timing_panel`): Fig. 11(b)'s second source, printed by Fig. 11 and Fig. 12."""
    caption = ("time to first token in the live engine (Fig. 11(b), second source; median over items) and the "
               "splice's cost")
    body = [
        [
            r.model,
            r.dtype,
            str(int(r.n)),
            str(int(r.prompt)),
            str(int(r.claimed)),
            cell(r.ttft_prefill_ms, ".2f"),
            cell(r.ttft_splice_ms, ".2f"),
            cell(r.compose_us, ".2f"),
            cell(r.write_us, ".2f"),
        ]
        for r in timing.itertuples(index=False)
    ]
    return panel_lines(caption, markdown_rows(TIMING_HEADER, body))


def engine_plot(panels: dict[str, pd.DataFrame], title: str) -> plt.Figure:
    """The engine panels side by side: (a) KL, (b) the largest ULP distance per element, (c) agreement, per arm with
    one bar per (model, dtype, source) label (kamera's own splice hatched)."""
    kl, ulp, agree = panels["kl"], panels["ulp"], panels["agree"]
    with plt.style.context(str(STYLE)):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(7.0, 3.2))
        engine_bars(a, kl, "kl_mean", FIG12A_ARMS)
        engine_bars(b, ulp, "max_element", (REFERENCE, *FIG12A_ARMS, "patch_r256"))
        engine_bars(c, agree, "agreement", FIG12C_ARMS)
        engine_floor_lines(a, kl, panels["floor"])
        a.set_yscale("log")
        a.set_ylabel("KL to re-prefill (mean)")
        a.set_title("(a) KL inside the engine")
        b.set_yscale("log")
        b.axhline(1.0, color="k", linestyle="--", linewidth=0.8)  # one bf16 ULP: the paper's claim
        b.set_ylim(bottom=1e-4)  # an exact arm's 0 sits on the axis
        b.set_ylabel("max bf16 ULPs per element")
        b.set_title("(b) written KV vs prefill")
        c.set_ylim(0, 1.05)
        c.set_ylabel("agreement with re-prefill")
        c.set_title("(c) answers vs re-prefill")
        a.legend(fontsize=4.5, loc="upper center", bbox_to_anchor=(1.8, -0.35), ncol=4)
        fig.suptitle(title)
        fig.subplots_adjust(left=0.08, right=0.98, top=0.84, bottom=0.4, wspace=0.45)
    return fig


def engine_bars(ax: plt.Axes, frame: pd.DataFrame, column: str, arms: tuple[str, ...]) -> None:
    """One engine panel: ``column`` per arm (those of ``arms`` present, in that order), a bar per label."""
    if frame.empty:
        blank(ax, "no rows")
        return
    labels = sorted(frame["model"].unique())
    arms = [x for x in arms if x in set(frame["arm"])]
    width = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        v = frame[frame["model"] == label].set_index("arm")[column]
        ax.bar(
            np.arange(len(arms)) + i * width,
            [max(v.get(x, np.nan), 1e-12) for x in arms],
            width,
            label=label,
            hatch="//" if label.endswith("own") else None,
        )
    ax.set_xticks(np.arange(len(arms)) + 0.4 - width / 2, arms, rotation=30, ha="right", fontsize=4.5)


def engine_floor_lines(ax: plt.Axes, kl: pd.DataFrame, floors: pd.Series) -> None:
    """Engine panel (a): each label's dtype floor dotted across its bars, in the label's colour."""
    labels = sorted(kl["model"].unique()) if not kl.empty else []
    for i, label in enumerate(labels):
        if label in floors.index:
            ax.hlines(
                max(float(floors[label]), 1e-12),
                -0.1,
                len(FIG12A_ARMS) - 0.2,
                colors=f"C{i}",
                linestyles=":",
                linewidth=0.8,
                label="dtype floor (full-rank patch)" if i == 0 else None,
            )


def engines_of(rows: pd.DataFrame) -> str:
    """The live engines whose rows ``rows`` hold, as a title names them ("vLLM", "vLLM and SGLang")."""
    names = [ENGINE_NAMES[s] for s in ENGINE_NAMES if s in set(rows["source"])]
    return " and ".join(names) or "the engine"


def engine_outputs(records: EngineRecords, group: str, stem: Path) -> tuple[str, list[Path]]:
    """The engine panels of ``records`` as <stem>.{pdf,png,md}: their markdown and paths."""
    panels = engine_panels(records)
    md = document(engine_markdown(panels, records), records.footer)
    _, paths = figure_outputs(
        engine_plot(panels, f"Fig. 12 inside {engines_of(records.rows)} ({group})"), md, stem, records.footer,
        place="figure"
    )
    return md, paths


def render(
    rows: pd.DataFrame,
    probes: pd.DataFrame,
    group: str,
    stem: Path,
    footer: str = "",
    paper: dict | None = None,
    engine: EngineRecords | None = None,
) -> tuple[str, list[Path]]:
    rows = labelled(rows)
    kl, agree = kl_panel(rows), agreement_panel(rows)
    reloc, floor = relocation_panel(one_label(of_probe(probes, "relocation"), "relocation"))
    if kl.empty and agree.empty and reloc.empty:
        raise SystemExit(f"{group} has no rows of {', '.join(FIG12A_ARMS + FIG12C_ARMS)} and no relocation records")
    title = f"Fig. 12 ({group}{partial_tag(footer)})"
    floors = kl_floor(rows)
    lines = to_markdown(kl, reloc, floor, agree, title, paper_or(paper, "fig12"), floors)
    md, paths = figure_outputs(
        plot(kl, reloc, floor, agree, title, floors), document(lines, footer), stem, footer, place="figure"
    )
    if engine is None:
        return md, paths
    engine_md, extra = engine_outputs(engine, group, suffixed(stem, "_engine"))
    return md + "\n" + engine_md, [*paths, *extra]


def main(argv: list[str] | None = None) -> None:
    def draw(exp: Experiment) -> tuple[str, list[Path]]:
        engine = engine_records(exp)
        if exp.jobs[0].cfg.get("engine"):  # an engine experiment rendered on its own: its panels alone
            return engine_outputs(engine, exp.name, exp.stem("figure"))
        return render(exp.rows, exp.probes, exp.name, exp.stem("figure"), exp.footer, exp.paper, engine)

    cli(__doc__, "fig12", draw, argv)


if __name__ == "__main__":
    main()
