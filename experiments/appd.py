"""App. D, the drift envelope: divergent antecedents, excess context and the cheapest correct refresh.

    python -m experiments.appd experiment=appd        # Qwen2.5-VL, Qwen3-VL, Kimi-VL on Video-MME segments
    python -m experiments.appd experiment=appd_tiny

Reads the ``divergent``, ``excess``, ``refresh`` and ``recall`` window rows of exactly the experiment's jobs;
writes the table <paths.tables>/<experiment>.md and .tex (per model, probe, setting and variant: η mean [95% CI],
median and measurable n, the mean KL to the re-prefill, the forwards run at the operation, flip-recover, the
antecedent's cosine divergence, the paper's value where it gives one) and the figure
<paths.figures>/<experiment>.pdf / .png / .md (one row of panels per model: (a) η of the stored and the exact
patch per perturbation, (b) η vs the number of distractors d, (c) η vs the number of swapped antecedent chunks
d, (d) η vs the recall's turnover τ of the stale, the stored (formed at eviction) and the exact (formed at the
recall) patch), and the divergence gate <paths.tables>/<experiment>_gate.md / .tex
(:func:`gate`: reuse the stored patch iff the antecedent's divergence is ≤ t, at three coverages, its
false-reuse rate and the η it serves against always reusing and always recomputing; App. D: "as a binary
reuse-vs-rebuild gate the cheap divergence signal is too weak"). ``reprefill`` rows (KL 0) are left out. The figure
draws medians: a mean over items is dominated by the few with a tiny KL_blind (the table has both).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from experiments.common import STYLE, cli, figure_outputs, footer_below, suffixed, table_outputs
from experiments.formats import document, markdown_rows, partial_tag
from experiments.paper import paper_or
from experiments.windows import RECALL, eta_cell, mean, mean_of, median, models, num, records, select
from kamera.metrics import SAFE_MARGIN, flip_recover, reuse_gate, transfer_safe

COVERAGES = (0.25, 0.5, 0.75)  # the gate's operating points: the share of cases it lets reuse the stored patch

PROBES = ("divergent", "excess", "refresh", "recall")
PANELS = (("divergent", "perturbation", ("transfer", "exact", "blind")),
          ("excess", "distractors", ("stale_matched", "stale_superset", "rebuilt", "blind")),
          ("refresh", "swapped", ("stale", "patch_update", "deep_refresh", "shallow_refresh", "blind")),
          ("recall", "turnover τ", (*RECALL.values(), "blind")))
ABSCISSA = {"excess": ("distractors", int), "refresh": ("swapped", int), "recall": ("tau", float)}  # numeric x


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


def table(rows: pd.DataFrame, paper: dict | None = None) -> pd.DataFrame:
    """One line per (model, probe, setting, variant); the paper's value (conf/experiment/appd.yaml
    ``paper.values``: model → probe → setting → variant) where it states one."""
    values = paper_or(paper, "appd").get("values", {})
    out = {}
    for model, a, probe, setting, variant, got in groups(rows):
        div = mean_of(got, "divergence") if probe == "divergent" else float("nan")
        out[(f"{model} ({a})", probe, setting, variant)] = [
            eta_cell(got), num(mean_of(got, "kl"), 3), num(mean_of(got, "forwards")),
            num(flip_recover([r["flip"] for r in got], [r["recovered"] for r in got])),
            sum(bool(r["flip"]) for r in got), num(div, 3),
            values.get(model, {}).get(probe, {}).get(setting, {}).get(variant, ""),
        ]
    frame = pd.DataFrame.from_dict(out, orient="index",
                                   columns=["η mean [95% CI]", "KL mean", "forwards at the operation", "flip-recover",
                                            "flips", "divergence", "paper"])
    frame.index = pd.MultiIndex.from_tuples(frame.index, names=["model", "probe", "setting", "variant"])
    return frame


def gate_cases(recs: list[dict]) -> list[dict]:
    """The divergent probe's cases in ``recs``, one per (model, item, perturbation) with a measurable transfer and
    exact η: the antecedent's divergence, both η and whether reusing the stored patch was safe
    (:func:`kamera.metrics.transfer_safe`)."""
    exact = {(r["model"], r["item_id"], r["setting"]): r["eta"] for r in recs if r["variant"] == "exact"}
    out = []
    for r in recs:
        e = exact.get((r["model"], r["item_id"], r["setting"]), float("nan"))
        if r["variant"] == "transfer" and r["eta"] == r["eta"] and e == e:
            out.append({"model": r["model"], "divergence": r["divergence"], "eta_transfer": r["eta"], "eta_exact": e,
                        "safe": transfer_safe(r["eta"], e)})
    return out


def gate(rows: pd.DataFrame, paper: dict | None = None) -> pd.DataFrame:
    """App. D's divergence gate per model and coverage (:func:`kamera.metrics.reuse_gate`): the threshold, the
    cases reused, the false-reuse rate, the median divergence of the safe and the unsafe cases, and the gate's
    decisions against the measured η: the mean η it serves (the stored patch where it reuses, the recomputed one
    where it refreshes) beside always reusing and always recomputing; the paper's values (``paper.gate``) beside."""
    stated = paper_or(paper, "appd").get("gate", {})
    recs = [r for r in records(rows) if r["probe"] == "divergent"]
    cases = gate_cases(recs)
    out = {}
    for model, a in models(recs):
        got = [c for c in cases if c["model"] == model]
        if not got:
            continue
        div, safe = [c["divergence"] for c in got], [c["safe"] for c in got]
        p = stated.get(model, {})
        medians = (f"{num(median(d for d, s in zip(div, safe, strict=True) if s), 3)} / "
                   f"{num(median(d for d, s in zip(div, safe, strict=True) if not s), 3)}")
        for coverage in COVERAGES:
            g = reuse_gate(div, safe, coverage)
            served = mean(c["eta_transfer"] if c["divergence"] <= g["threshold"] else c["eta_exact"] for c in got)
            out[(f"{model} ({a})", f"{coverage:.0%}")] = [
                f"{len(got)} ({sum(not s for s in safe)} unsafe)",
                medians + (f" (paper {p['medians']})" if p else ""),
                num(g["threshold"], 3),
                num(g["reused"]),
                num(g["false_reuse"]) + (f" (paper {p['false_reuse']})" if p else ""),
                f"{num(served)} / {num(mean(c['eta_transfer'] for c in got))} / "
                f"{num(mean(c['eta_exact'] for c in got))}",
            ]
    frame = pd.DataFrame.from_dict(
        out,
        orient="index",
        columns=[
            "cases",
            "divergence median safe / unsafe",
            "threshold t",
            "reused",
            "false-reuse",
            "η served by the gate / always reuse / always recompute",
        ],
    )
    if len(frame):
        frame.index = pd.MultiIndex.from_tuples(frame.index, names=["model", "coverage"])
    return frame


def curve(rows: pd.DataFrame) -> pd.DataFrame:
    """The figure's data: mean and median η per (model, probe, x, variant), x the panel's abscissa."""
    out = []
    for model, a, probe, _, variant, got in groups(rows):
        if probe == "divergent":
            x = got[0]["perturbation"]
        else:
            column, kind = ABSCISSA[probe]
            x = kind(got[0][column])
        out.append(
            {
                "model": model,
                "arch": a,
                "probe": probe,
                "x": x,
                "variant": variant,
                "n": len(got),
                "eta": mean(r["eta"] for r in got),
                "eta_median": median(r["eta"] for r in got),
            }
        )
    return pd.DataFrame(out)


def plot(data: pd.DataFrame, title: str, footer: str = "") -> plt.Figure:
    lines = list(dict.fromkeys(data["model"]))
    with plt.style.context(str(STYLE)):
        fig, axes = plt.subplots(len(lines), len(PANELS), figsize=(8.5, 1.9 * len(lines) + 0.6), squeeze=False)
        for row, model in zip(axes, lines, strict=True):
            for ax, (probe, _, variants) in zip(row, PANELS, strict=True):
                g = data[(data["model"] == model) & (data["probe"] == probe)]
                for i, variant in enumerate(variants):
                    v = g[g["variant"] == variant]
                    style = {"linestyle": ":", "color": "0.5"} if variant == "blind" else {"color": f"C{i}"}
                    ax.plot(
                        v["x"].astype(str) if probe == "divergent" else v["x"],
                        v["eta_median"],
                        marker="os^vD"[i],
                        markersize=3.5 - 0.4 * i,
                        label=variant,
                        **style,
                    )
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
        footer_below(fig, footer)
    return fig


def figure_markdown(data: pd.DataFrame, group: str, footer: str = "") -> str:
    body = [
        [f"{r['model']} ({r['arch']})", r["probe"], r["x"], r["variant"], r["n"], num(r["eta"]), num(r["eta_median"])]
        for _, r in data.iterrows()
    ]
    return document(
        [
            f"**App. D ({group})** — η per panel point: mean / median over items with a measurable deficit",
            "",
            *markdown_rows(["model", "probe", "x", "variant", "n", "η mean", "η median"], body),
        ],
        footer,
    )


def render(
    rows: pd.DataFrame, group: str, tables: Path, figures: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    frame = table(rows, paper)
    if frame.empty:
        raise SystemExit(f"{group} has no divergent, excess, refresh or recall window rows")
    notes = [
        "Divergent: the stored patch formed on A served behind A′ (transfer) vs A′'s own (exact); divergence = 1 − "
        "cos of the chunk-wise mean input embeddings. Excess: a stored {X, Y} patch behind d distractors, "
        "position-matched (stale_matched) or formed without them and relocated (stale_superset), vs rebuilt. "
        "Refresh: after d of K = 4 antecedent chunks were swapped, the stale KV vs a rank-32 patch update, the deep "
        "three quarters re-prefilled, or the shallow quarter only. Recall: the chunk re-admitted after τ of the window "
        "turned over (Table 1's probe at every τ): the stale patch, the stored one (formed at eviction, kept in the "
        "canonical's frame, relocated at the recall) and the exact one (re-formed at the recall, its forward paid "
        "there). Paper: App. D of the preprint."
    ]
    tag = partial_tag(footer)
    md, paths = table_outputs(
        frame,
        tables,
        f"App. D ({group}) — the drift envelope{tag}",
        f"Divergent antecedents, excess context and the cheapest refresh ({group}).",
        f"tab:{group}",
        footer,
        notes,
        math=False,
    )
    data = curve(rows)
    fig = plot(data, f"App. D ({group}{tag}): median η of the stored / refreshed chunk (means in the table)", footer)
    _, figure_paths = figure_outputs(fig, figure_markdown(data, group, footer), figures, footer, place=None)
    gated = gate(rows, paper)
    if gated.empty:
        return md, [*paths, *figure_paths]
    stated = paper_or(paper, "appd").get("gate", {})
    quoted = "; ".join(
        f"{m}: false-reuse {v['false_reuse']} at any useful coverage, safe / unsafe divergence medians {v['medians']}"
        for m, v in stated.items()
    )
    gate_notes = [
        f"The gate: reuse the stored patch behind A′ iff the divergence is ≤ t, t set to reuse the given "
        f"coverage of the divergent probe's cases (item × perturbation with a measurable η); a case is "
        f"safe when the stored patch's η is within {SAFE_MARGIN} of the recomputed patch's "
        f"(kamera.metrics.transfer_safe); false-reuse = unsafe among the reused. Paper (App. D): {quoted}: a "
        "soft prioritization hint, not a gate."
    ]
    gate_md, gate_paths = table_outputs(
        gated,
        suffixed(tables, "_gate"),
        f"App. D ({group}) — the divergence gate: reuse or refresh{tag}",
        f"The divergence gate's decisions against the measured η ({group}).",
        f"tab:{group}_gate",
        footer,
        gate_notes,
        math=False,
    )
    return md + "\n" + gate_md, [*paths, *figure_paths, *gate_paths]


def main(argv: list[str] | None = None) -> None:
    def draw(exp):
        figure = exp.out.with_name(exp.out.name + "_figure") if exp.out else exp.stem("figure")  # --out: one stem each
        return render(exp.rows, exp.name, exp.stem("table"), figure, exp.footer, exp.paper)

    cli(__doc__, "appd", draw, argv)


if __name__ == "__main__":
    main()
