"""App. D, the drift envelope: divergent antecedents, excess context and the cheapest correct refresh.

    python -m experiments.appd experiment=appd        # Qwen2.5-VL, Qwen3-VL, Kimi-VL on Video-MME segments
    python -m experiments.appd experiment=appd_tiny

Reads the ``divergent``, ``excess`` and ``refresh`` window rows of exactly the experiment's jobs; writes
the table <paths.tables>/<experiment>.md and .tex (per model, probe, setting and variant: η mean [95% CI],
median and measurable n, flip-recover, the antecedent's cosine divergence, the paper's value where it
gives one) and the figure <paths.figures>/<experiment>.pdf / .png / .md (one row of panels per model:
(a) η of the stored and the exact patch per perturbation, (b) η vs the number of distractors d, (c) η
vs the number of swapped antecedent chunks d). ``reprefill`` rows (KL 0) are left out. The figure
draws medians: a mean over items is dominated by the few with a tiny KL_blind (the table has both).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from experiments.common import STYLE, load, publish, save_figure, write_text
from experiments.windows import eta_cell, footnote, mean_of, models, num, records, write_table
from kamera.metrics import flip_recover
from kamera.window.summary import mean, median, select

PROBES = ("divergent", "excess", "refresh")
# App. D of the paper, Qwen2.5-VL (GQA) unless the model says otherwise: (model, probe, setting, variant) → value.
PAPER_APPD = {
    ("qwen2_5_vl_7b", "divergent", "drop_duplicate", "transfer"): "0.92",
    ("qwen2_5_vl_7b", "divergent", "drop_duplicate", "exact"): "0.92",
    ("qwen2_5_vl_7b", "divergent", "reorder", "transfer"): "0.76–0.77",
    ("qwen2_5_vl_7b", "divergent", "replace_one", "transfer"): "0.76–0.77",
    ("qwen2_5_vl_7b", "divergent", "replace_all", "transfer"): "−3.5 (divergence 0.43)",
    ("qwen2_5_vl_7b", "divergent", "replace_all", "exact"): "0.95",
    **{("qwen2_5_vl_7b", "excess", f"d={d}", "stale_matched"): v for d, v in enumerate(("0.93", "0.71", "0.39", "0.08"))},
    **{("qwen2_5_vl_7b", "excess", f"d={d}", "rebuilt"): "≈ 0.92" for d in range(4)},
    **{("qwen2_5_vl_7b", "refresh", f"d={d}", "patch_update"): "0.81–0.91" for d in range(4)},
    **{("qwen3_vl_8b", "refresh", f"d={d}", "patch_update"): "0.94–0.98" for d in range(4)},
    **{("qwen2_5_vl_7b", "refresh", f"d={d}", "deep_refresh"): "≥ 0.90" for d in range(4)},
    ("qwen2_5_vl_7b", "refresh", "d=3", "shallow_refresh"): "down to 0.37",
}
PANELS = (("divergent", "perturbation", ("transfer", "exact", "blind")),
          ("excess", "distractors", ("stale_matched", "stale_superset", "rebuilt", "blind")),
          ("refresh", "swapped", ("stale", "patch_update", "deep_refresh", "shallow_refresh", "blind")))


def groups(rows: pd.DataFrame) -> list[tuple[str, str, str, str, list[dict]]]:
    """(model, arch, probe, setting, variant) groups of App. D rows, in the order the probes wrote them."""
    recs = [r for r in records(rows) if r["probe"] in PROBES and r["variant"] != "reprefill"]
    out = []
    for model, a in models(recs):
        for probe in PROBES:
            mine = select(recs, model=model, probe=probe)
            for key in dict.fromkeys((r["setting"], r["variant"]) for r in mine):
                out.append((model, a, probe, *key, select(mine, setting=key[0], variant=key[1])))
    return out


def table(rows: pd.DataFrame) -> pd.DataFrame:
    out = {}
    for model, a, probe, setting, variant, got in groups(rows):
        div = mean_of(got, "divergence") if probe == "divergent" else float("nan")
        out[(f"{model} ({a})", probe, setting, variant)] = [
            eta_cell(r["eta"] for r in got), num(flip_recover([r["flip"] for r in got], [r["recovered"] for r in got])),
            sum(bool(r["flip"]) for r in got), num(div, 3), PAPER_APPD.get((model, probe, setting, variant), ""),
        ]
    frame = pd.DataFrame.from_dict(out, orient="index",
                                   columns=["η mean [95% CI]", "flip-recover", "flips", "divergence", "paper"])
    frame.index = pd.MultiIndex.from_tuples(frame.index, names=["model", "probe", "setting", "variant"])
    return frame


def curve(rows: pd.DataFrame) -> pd.DataFrame:
    """The figure's data: mean and median η per (model, probe, x, variant), x the panel's abscissa."""
    out = []
    for model, a, probe, _, variant, got in groups(rows):
        x = got[0]["perturbation"] if probe == "divergent" else int(got[0]["distractors" if probe == "excess" else "swapped"])
        out.append({"model": model, "arch": a, "probe": probe, "x": x, "variant": variant, "n": len(got),
                    "eta": mean(r["eta"] for r in got), "eta_median": median(r["eta"] for r in got)})
    return pd.DataFrame(out)


def plot(data: pd.DataFrame, title: str, footer: str = "") -> plt.Figure:
    lines = list(dict.fromkeys(data["model"]))
    with plt.style.context(str(STYLE)):
        fig, axes = plt.subplots(len(lines), 3, figsize=(6.5, 1.9 * len(lines) + 0.6), squeeze=False)
        for row, model in zip(axes, lines, strict=True):
            for ax, (probe, _, variants) in zip(row, PANELS, strict=True):
                g = data[(data["model"] == model) & (data["probe"] == probe)]
                for i, variant in enumerate(variants):
                    v = g[g["variant"] == variant]
                    style = {"linestyle": ":", "color": "0.5"} if variant == "blind" else {"color": f"C{i}"}
                    ax.plot(v["x"].astype(str) if probe == "divergent" else v["x"], v["eta_median"],
                            marker="os^vD"[i], markersize=3.5 - 0.4 * i, label=variant, **style)
                ax.axhline(0.0, color="0.5", linewidth=0.6)
                ax.set_title(f"{model} ({g['arch'].iloc[0] if len(g) else '–'}): {probe}")
                ax.tick_params(axis="x", labelsize=5, rotation=15 if probe == "divergent" else 0)
                if len(g) == 0:
                    ax.text(0.5, 0.5, "no rows", transform=ax.transAxes, ha="center")
            row[0].set_ylabel("η (median over items)")
        for ax, (_, xlabel, _) in zip(axes[-1], PANELS, strict=True):
            ax.set_xlabel(xlabel)
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.4), ncol=2)
        fig.suptitle(title, fontsize=8)
        fig.tight_layout()
        footnote(fig, footer)
    return fig


def figure_markdown(data: pd.DataFrame, group: str, footer: str = "") -> str:
    lines = [f"**App. D ({group})** — η per panel point: mean / median over items with a measurable deficit", "",
             "| model | probe | x | variant | n | η mean | η median |", "|---" * 7 + "|"]
    lines += [f"| {r['model']} ({r['arch']}) | {r['probe']} | {r['x']} | {r['variant']} | {r['n']} | {num(r['eta'])} | "
              f"{num(r['eta_median'])} |" for _, r in data.iterrows()]
    if footer:
        lines.append(f"\n_{footer}_")
    return "\n".join(lines) + "\n"


def render(rows: pd.DataFrame, group: str, tables: Path, figures: Path, footer: str = "") -> tuple[str, list[Path]]:
    frame = table(rows)
    if frame.empty:
        raise SystemExit(f"{group} has no divergent, excess or refresh window rows")
    notes = ["Divergent: the stored patch formed on A served behind A′ (transfer) vs A′'s own (exact); divergence = 1 − "
             "cos of the chunk-wise mean input embeddings. Excess: a stored {X, Y} patch behind d distractors, "
             "position-matched (stale_matched) or formed without them and relocated (stale_superset), vs rebuilt. "
             "Refresh: after d of K = 4 antecedent chunks were swapped, the stale KV vs a rank-32 patch update, the deep "
             "three quarters re-prefilled, or the shallow quarter only. Paper: App. D of the preprint."]
    md, paths = write_table(frame, tables, f"App. D ({group}) — the drift envelope",
                            f"Divergent antecedents, excess context and the cheapest refresh ({group}).",
                            f"tab:{group}", footer, notes)
    data = curve(rows)
    partial = ", partial" if footer.startswith("PARTIAL") else ""
    fig = plot(data, f"App. D ({group}{partial}): median η of the stored / refreshed chunk (means in the table)",
               footer)
    paths += [*save_figure(fig, figures), write_text(figures.with_suffix(".md"), figure_markdown(data, group, footer))]
    return md, paths


def main(argv: list[str] | None = None) -> None:
    exp = load(__doc__.split("\n\n")[0], "appd", argv)
    figure = exp.out.with_name(exp.out.name + "_figure") if exp.out else exp.stem("figure")  # --out: one stem each
    md, paths = render(exp.rows, exp.name, exp.stem("table"), figure, exp.footer)
    print(md)
    publish(exp, paths)


if __name__ == "__main__":
    main()
