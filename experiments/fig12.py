"""Figure 12, measured in the harness: position is fixed by R(δ), conditioning by the patch, and reuse
matches the re-prefill answers.

    python -m experiments.fig12 experiment=fig12_tiny       # make fig12 (SCALE=paper: 4 backbones, Video-MME, EgoSchema)

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

With ``KAMERA_ENGINE_ROWS=<folder>`` (``make fig12 ENGINE=vllm`` sets it; docs/engine.md) the render adds
the live-engine panels from that folder's ``rows.csv`` / ``timing.csv`` (the view ``python -m
kamera.engine.fig12`` writes of its keyed shards; a folder mixing code versions or checkpoints is refused): the
same items spliced through vLLM's KV connector and through kamera's own splice on one checkpoint, (a) KL per
arm, (b) the fraction of B's K / V within one bf16 ULP of the prefill's,
(c) answers and agreement with re-prefill, and the time to first token with and without the splice and the
connector's time per claimed token; written to <experiment>_engine.{pdf,png,md} (and printed after the main table).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import (
    STYLE,
    _commit,
    cli,
    document,
    figure_outputs,
    markdown_rows,
    paper_or,
    partial_tag,
    suffixed,
)
from experiments.panels import blank, cell, of_probe, one_label
from kamera.diagnostics.fidelity import FIG12A_ARMS, FIG12C_ARMS, REFERENCE, kl_by_arm, mc_agreement

FLOOR_LAYER = 0
KL_FLOOR_ARM = "patch_full"  # the full-rank patch in the model's dtype: its KL is what the dtype's rounding leaves
ENGINE_ROWS = "KAMERA_ENGINE_ROWS"  # a folder of kamera.engine.fig12's rows.csv and timing.csv


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
    out = pd.DataFrame({"layer0": first.groupby(level=keys).median(), "worst_layer": worst.groupby(level=keys).median(),
                        "items": worst.groupby(level=keys).size()}).reset_index()
    floor = records[(records["quantity"] == "bf16_floor") & (records["layer"] == FLOOR_LAYER)]["value"]
    return out.sort_values(keys).reset_index(drop=True), float(floor.median()) if len(floor) else float("nan")


def kl_floor(rows: pd.DataFrame) -> pd.Series:
    """Fig. 12(a)'s floor line per model label: the median KL to re-prefill of the full-rank patch in the model's dtype
    (``patch_full``), the KL rounding alone leaves (bf16 at paper scale; experiments/bf16_floor.py's floor); empty
    without those rows."""
    if rows.empty:
        return pd.Series(dtype=float)
    return rows[rows["arm"] == KL_FLOOR_ARM].groupby("model")["kl"].median()


def plot(kl: pd.DataFrame, reloc: pd.DataFrame, floor: float, agree: pd.DataFrame, title: str,
         kl_floors: pd.Series | None = None) -> plt.Figure:
    with plt.style.context(str(STYLE)):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(7.0, 3.4))
        if kl.empty:
            blank(a, f"no rows of {', '.join(FIG12A_ARMS)}")
        else:
            models = sorted(kl["model"].unique())
            arms = [x for x in FIG12A_ARMS if x in set(kl["arm"])]
            width = 0.8 / len(arms)
            for i, arm in enumerate(arms):
                v = kl[kl["arm"] == arm].set_index("model")["kl_mean"]
                a.bar(np.arange(len(models)) + i * width, [max(v.get(m, np.nan), 1e-12) for m in models], width,
                      label=arm)
            floors = pd.Series(dtype=float) if kl_floors is None else kl_floors
            for j, m in enumerate(models):
                if m in floors.index:
                    a.hlines(max(float(floors[m]), 1e-12), j - width / 2, j + 0.8 - width / 2, colors="k",
                             linestyles=":", linewidth=0.9, label="dtype floor (full-rank patch)" if j == 0 else None)
            a.set_yscale("log")
            a.set_xticks(np.arange(len(models)) + 0.4 - width / 2, models, rotation=30, ha="right", fontsize=4.5)
            a.set_ylabel("KL to re-prefill (mean)")
            a.legend(fontsize=4.5, loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=2)
        a.set_title("(a) KL per backbone")
        if reloc.empty:
            blank(b, "no relocation records")
        else:
            colour = {m: f"C{i}" for i, m in enumerate(sorted(reloc["model"].unique()))}
            dashes = {d: style for d, style in zip(sorted(reloc["dtype"].unique()), ("--", "-", "-."), strict=False)}
            for (model, dtype), g in reloc.groupby(["model", "dtype"], sort=True):
                b.plot(g["distance"], g["layer0"].clip(lower=1e-12), marker="o", markersize=2, color=colour[model],
                       linestyle=dashes[dtype])
            schemes = reloc.groupby("model")["scheme"].first()
            handles = [plt.Line2D([], [], color=colour[m], label=f"{m} ({schemes[m]})") for m in colour]
            handles += [plt.Line2D([], [], color="0.3", linestyle=st, label=d) for d, st in dashes.items()]
            if not np.isnan(floor):
                b.axhline(floor, color="k", linestyle=":", linewidth=0.9)
                handles.append(plt.Line2D([], [], color="k", linestyle=":", label="bf16 floor"))
            b.set_xscale("log")
            b.set_yscale("log")
            b.set_xlabel("relocation distance δ (positions)")
            b.set_ylabel("rel. error vs prefill at δ (layer 0)")
            b.legend(handles=handles, fontsize=4.5, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
        b.set_title("(b) relocation error")
        if agree.empty:
            blank(c, f"no multiple-choice rows of {REFERENCE} and {', '.join(FIG12C_ARMS)}")
        else:
            groups = sorted({(m, x) for m, x in zip(agree["model"], agree["bench"], strict=True)})
            arms = [REFERENCE, *[x for x in FIG12C_ARMS if x in set(agree["arm"])]]
            width = 0.8 / len(arms)
            right = c.twinx()
            for i, arm in enumerate(arms):
                g = agree[agree["arm"] == arm].set_index(["model", "bench"])
                xs = np.arange(len(groups)) + i * width
                c.bar(xs, [g["accuracy"].get(k, np.nan) for k in groups], width, label=arm)
                if arm != REFERENCE:
                    right.plot(xs, [100 * g["agreement"].get(k, np.nan) for k in groups], "kv", markersize=2.5)
            chance = agree.groupby(["model", "bench"])["chance"].first()
            for i, k in enumerate(groups):
                c.hlines(chance[k], i - width / 2, i + 0.8 - width / 2, color="0.3", linestyle=":", linewidth=0.8,
                         label="chance" if i == 0 else None)
            c.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, [f"{m} · {x}" for m, x in groups], rotation=30,
                         ha="right", fontsize=4.5)
            c.set_ylim(0, 1)
            c.set_ylabel("MC accuracy")
            right.set_ylim(0, 105)
            right.set_ylabel("agreement with re-prefill (%, ▼)")
            right.grid(False)
            c.legend(fontsize=4.5, loc="upper center", bbox_to_anchor=(0.5, -0.42), ncol=3)
        c.set_title("(c) reuse vs the ceiling")
        fig.suptitle(title)
        fig.subplots_adjust(left=0.08, right=0.92, top=0.84, bottom=0.42, wspace=0.55)
    return fig


def to_markdown(kl: pd.DataFrame, reloc: pd.DataFrame, floor: float, agree: pd.DataFrame, title: str,
                paper: dict, kl_floors: pd.Series | None = None) -> list[str]:
    lines = [f"**{title}** — the harness's own splice (the paper measures inside SGLang)", "",
             "*(a) next-token KL to re-prefill; dtype floor = median KL of the full-rank patch in the model's dtype "
             "(what rounding alone leaves: bf16 at paper scale), the dotted line*", ""]
    if kl.empty:
        lines.append(f"no rows of {', '.join(FIG12A_ARMS)}")
    else:
        floors = pd.Series(dtype=float) if kl_floors is None else kl_floors
        body = [[r.model, r.arm, str(int(r.n)), cell(r.kl_mean, ".2e"), cell(r.kl_median, ".2e"), cell(r.argmax_flip, ".2f"),
                 cell(floors.get(r.model, float("nan")), ".2e"), paper.get("kl", {}).get(r.arm, "–")]
                for r in kl.itertuples(index=False)]
        lines += markdown_rows(["model", "arm", "n", "KL mean", "KL median", "argmax flips", "dtype floor", "paper KL"],
                               body)
    lines += ["", f"*(b) relative error of relocated keys (median over items); bf16 floor {cell(floor, '.2e')}*", ""]
    if reloc.empty:
        lines.append("no relocation records")
    else:
        body = [[r.model, r.scheme, r.dtype, str(int(r.distance)), str(int(r.items)), cell(r.layer0, ".2e"),
                 cell(r.worst_layer, ".2e")] for r in reloc.itertuples(index=False)]
        lines += markdown_rows(["model", "scheme", "dtype", "δ", "items", "layer 0", "worst layer"], body)
    lines += ["", "*(c) multiple-choice accuracy and per-item agreement with re-prefill*", ""]
    if agree.empty:
        lines.append(f"no multiple-choice rows of {REFERENCE} and {', '.join(FIG12C_ARMS)}")
    else:
        body = [[r.model, r.bench, r.arm, str(r.n), cell(r.accuracy, ".3f"), cell(100 * r.agreement, ".1f"),
                 cell(r.chance, ".2f"), paper.get("agreement", "–") if r.arm != REFERENCE else "–"]
                for r in agree.itertuples(index=False)]
        lines += markdown_rows(["model", "bench", "arm", "n", "accuracy", "agreement %", "chance", "paper agreement"], body)
    return [*lines, "", paper["note"]]


# ----- the live-engine panels ----------------------------------------------------------------------------
def engine_labelled(rows: pd.DataFrame) -> pd.DataFrame:
    """Engine rows with ``model`` as the panels label them: ``model · dtype · source``."""
    return rows.assign(model=[f"{m} · {d} · {s}" for m, d, s in zip(rows["model"], rows["dtype"], rows["source"],
                                                                       strict=True)])


def ulp_panel(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model label, arm): mean over items of the fraction of B's K / V within one (and four) bf16 ULPs of the
    prefill's, every layer, and within one at layer 0."""
    g = rows.groupby(["model", "arm"], sort=False)
    out = pd.DataFrame({"n": g.size(), "le1": g["ulp_le1"].mean(), "le1_l0": g["ulp_le1_l0"].mean(),
                        "le4": g["ulp_le4"].mean()}).reset_index()
    return in_order(out, tuple(dict.fromkeys([REFERENCE, *FIG12A_ARMS, *FIG12C_ARMS])))


def timing_panel(timing: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dtype): median over items of the time to first token of vLLM's prefill and of the spliced request, and
    of the connector's compose and write time per claimed token (µs)."""
    g = timing.groupby(["model", "dtype"], sort=True)
    per_token = timing.assign(compose_us=1e6 * timing["compose_s"] / timing["claimed_tokens"],
                              write_us=1e6 * timing["write_s"] / timing["claimed_tokens"]).groupby(["model", "dtype"], sort=True)
    return pd.DataFrame({"n": g.size(), "prompt": g["prompt_tokens"].first(), "claimed": g["claimed_tokens"].first(),
                         "ttft_prefill_ms": 1e3 * g["ttft_prefill_s"].median(), "ttft_splice_ms": 1e3 * g["ttft_splice_s"].median(),
                         "compose_us": per_token["compose_us"].median(), "write_us": per_token["write_us"].median()}).reset_index()


def engine_view(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``folder``'s rows.csv and timing.csv (the view ``python -m kamera.engine.fig12`` writes of its shards); one line
    and exit when they mix code versions, library versions or checkpoints, or predate keyed rows."""
    from kamera.engine.rows import EngineRowsError, load_view

    try:
        return load_view(folder)
    except EngineRowsError as err:
        raise SystemExit(f"refusing to render: {err}") from None


def engine_panels(folder: Path) -> dict[str, pd.DataFrame]:
    """The engine panels from ``folder``'s rows.csv and timing.csv (:func:`engine_view`)."""
    rows, timing = engine_view(folder)
    rows = engine_labelled(rows)
    return {"kl": kl_panel(rows), "ulp": ulp_panel(rows), "agree": agreement_panel(rows), "timing": timing_panel(timing)}


def engine_markdown(panels: dict[str, pd.DataFrame], folder: Path) -> list[str]:
    kl, ulp, agree, timing = panels["kl"], panels["ulp"], panels["agree"], panels["timing"]
    lines = ["", f"**Fig. 12 inside vLLM** — the chunk spliced through the KV connector (``vllm``) beside kamera's own "
             f"splice on the same checkpoint and items (``own``); rows from {folder}", "",
             "*(a) next-token KL to re-prefill*", ""]
    lines += markdown_rows(["model · dtype · source", "arm", "n", "KL mean", "KL median", "argmax flips"],
                           [[r.model, r.arm, str(int(r.n)), cell(r.kl_mean, ".2e"), cell(r.kl_median, ".2e"),
                             cell(r.argmax_flip, ".2f")] for r in kl.itertuples(index=False)])
    lines += ["", "*(b) B's K / V within one bf16 ULP of the prefill's (mean fraction over items)*", ""]
    lines += markdown_rows(["model · dtype · source", "arm", "n", "≤ 1 ULP, all layers", "≤ 1 ULP, layer 0", "≤ 4 ULP, all layers"],
                           [[r.model, r.arm, str(int(r.n)), cell(r.le1, ".4f"), cell(r.le1_l0, ".4f"), cell(r.le4, ".4f")]
                            for r in ulp.itertuples(index=False)])
    lines += ["", "*(c) multiple-choice accuracy and per-item agreement with re-prefill*", ""]
    lines += markdown_rows(["model · dtype · source", "arm", "n", "accuracy", "agreement %", "chance"],
                           [[r.model, r.arm, str(r.n), cell(r.accuracy, ".3f"), cell(100 * r.agreement, ".1f"),
                             cell(r.chance, ".2f")] for r in agree.itertuples(index=False)])
    return lines + timing_lines(timing) + clock_lines(folder)


def clock_lines(folder: Path) -> list[str]:
    """The fair clock's table (``make engine-clock`` writes <folder>/clock/clock.md: full prefill, prefix hit and
    splice per chunk length, interleaved), when it has run; Fig. 11(b)'s engine source beside the per-item TTFTs."""
    path = folder / "clock" / "clock.md"
    if not path.is_file():
        return []
    title, *rest = path.read_text().strip().splitlines()
    return ["", f"*{title.lstrip('# ')} ({path})*", *rest]


def timing_lines(timing: pd.DataFrame) -> list[str]:
    """The engine's timing table (:func:`timing_panel`): Fig. 11(b)'s second source, printed by Fig. 11 and Fig. 12."""
    lines = ["", "*time to first token in vLLM (Fig. 11(b), second source; median over items) and the connector's cost*",
             ""]
    return lines + markdown_rows(["model", "dtype", "items", "prompt", "claimed", "TTFT prefill ms", "TTFT splice ms",
                                  "compose µs / token", "write µs / token"],
                                 [[r.model, r.dtype, str(int(r.n)), str(int(r.prompt)), str(int(r.claimed)),
                                   cell(r.ttft_prefill_ms, ".2f"), cell(r.ttft_splice_ms, ".2f"), cell(r.compose_us, ".2f"),
                                   cell(r.write_us, ".2f")] for r in timing.itertuples(index=False)])


def engine_folder() -> Path | None:
    """The engine rows' folder the render was given (``KAMERA_ENGINE_ROWS``), if any."""
    return Path(os.environ[ENGINE_ROWS]) if os.environ.get(ENGINE_ROWS) else None


def engine_plot(panels: dict[str, pd.DataFrame], title: str) -> plt.Figure:
    kl, ulp, agree = panels["kl"], panels["ulp"], panels["agree"]
    with plt.style.context(str(STYLE)):
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(7.0, 3.2))
        for ax, frame, column, arms in ((a, kl, "kl_mean", FIG12A_ARMS), (b, ulp, "le1", (REFERENCE, *FIG12A_ARMS, "patch_r256")),
                                        (c, agree, "agreement", FIG12C_ARMS)):
            labels = sorted(frame["model"].unique())
            arms = [x for x in arms if x in set(frame["arm"])]
            width = 0.8 / max(len(labels), 1)
            for i, label in enumerate(labels):
                v = frame[frame["model"] == label].set_index("arm")[column]
                ax.bar(np.arange(len(arms)) + i * width, [max(v.get(x, np.nan), 1e-12) for x in arms], width,
                       label=label, hatch="//" if label.endswith("own") else None)
            ax.set_xticks(np.arange(len(arms)) + 0.4 - width / 2, arms, rotation=30, ha="right", fontsize=4.5)
        a.set_yscale("log")
        a.set_ylabel("KL to re-prefill (mean)")
        a.set_title("(a) KL inside vLLM")
        b.set_ylim(0, 1.05)
        b.set_ylabel("B's K / V within 1 bf16 ULP")
        b.set_title("(b) written KV vs prefill")
        c.set_ylim(0, 1.05)
        c.set_ylabel("agreement with re-prefill")
        c.set_title("(c) answers vs re-prefill")
        a.legend(fontsize=4.5, loc="upper center", bbox_to_anchor=(1.8, -0.35), ncol=4)
        fig.suptitle(title)
        fig.subplots_adjust(left=0.08, right=0.98, top=0.84, bottom=0.4, wspace=0.45)
    return fig


def render(rows: pd.DataFrame, probes: pd.DataFrame, group: str, stem: Path, footer: str = "",
           paper: dict | None = None, engine: Path | None = None) -> tuple[str, list[Path]]:
    rows = labelled(rows)
    kl, agree = kl_panel(rows), agreement_panel(rows)
    reloc, floor = relocation_panel(one_label(of_probe(probes, "relocation"), "relocation"))
    if kl.empty and agree.empty and reloc.empty:
        raise SystemExit(f"{group} has no rows of {', '.join(FIG12A_ARMS + FIG12C_ARMS)} and no relocation records")
    title = f"Fig. 12 ({group}{partial_tag(footer)})"
    floors = kl_floor(rows)
    lines = to_markdown(kl, reloc, floor, agree, title, paper_or(paper, "fig12"), floors)
    extra: list[Path] = []
    md, paths = figure_outputs(plot(kl, reloc, floor, agree, title, floors), document(lines, footer), stem, footer,
                               place="figure")
    if engine is not None:
        panels, engine_footer = engine_panels(engine), engine_provenance(engine)
        engine_md = document(engine_markdown(panels, engine), engine_footer)
        _, extra = figure_outputs(engine_plot(panels, f"Fig. 12 inside vLLM ({group})"), engine_md,
                                  suffixed(stem, "_engine"), engine_footer, place="figure")
        md += "\n" + engine_md
    return md, [*paths, *extra]


def engine_provenance(folder: Path) -> str:
    """The engine rows' footer: where they are, the libraries and code versions that made them, the checkpoints
    and the items. Checks the rows first (:func:`engine_view`), so Fig. 11's second source is refused alike."""
    engine_view(folder)
    meta = json.loads((folder / "meta.json").read_text())
    versions = ", ".join(f"{d} {v}" for d, v in meta["versions"].items())
    code = ", ".join(f"{c} {v}" for c, v in meta["code"].items())
    commits = ", ".join(_commit(c["commit"], c["dirty"]) for c in meta.get("commits", [])) or "unknown (rows predate it)"
    return (f"engine rows: {folder} (shards {folder}/shards), commit {commits}, {versions}, engine {code}, checkpoint "
            f"{meta['checkpoint']}, {meta['items']} items (seed {meta['seed']}), dtype {'/'.join(meta['dtypes'])}, "
            f"device {meta['device']}")


def main(argv: list[str] | None = None) -> None:
    engine = engine_folder()
    cli(__doc__, "fig12", lambda exp: render(exp.rows, exp.probes, exp.name, exp.stem("figure"), exp.footer, exp.paper,
                                             engine), argv)


if __name__ == "__main__":
    main()
