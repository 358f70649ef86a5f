"""Figure 3: the structure of the conditioning deficit on the content channel, one row of panels per model.

    python -m experiments.fig3 experiment=fig3_tiny        # make fig3 (SCALE=paper: Kimi-VL, Qwen2.5-VL)

(a) energy of Δ a rank-m patch captures, per layer (``energy`` probe; mean over items; the dotted
line is the median 90%-energy rank over the layers whose Δ is above rounding, the layer rule of
``kamera.metrics.e90_columns``: layer 0's Δ is rounding and its e90 says nothing of conditioning);
(b) the relative Frobenius norm of Δ per layer: raw (the canonical as stored), conditioning (after
R(δ), ‖Δ‖ / ‖KV(B|A)‖) and the position confound between them, plus the 4D-mask oracle's split of Δ
into what A adds and what the moved prefix distance adds (``deficit_norms`` probe, mean over items);
(c) A's landmark keys holding 90% of the attention B pays A, per layer (``landmarks`` probe, median over
items). All on the content channel (V; the MLA latent c_KV), as the paper plots Kimi-VL's; the markdown
table lists every layer. Writes
<paths.figures>/<experiment>.{pdf,png,md}.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, cli, figure_outputs
from experiments.formats import document, markdown_rows, partial_tag
from experiments.panels import blank, cell, integer_ticks, of_probe, one_label
from experiments.paper import paper_or

NORMS = {
    "raw": ("raw (no R(δ))", ":"),
    "ratio": ("conditioning ‖Δ‖", "-"),
    "position": ("position (R(δ) alone)", "--"),
    "conditioning_a": ("A-specific (oracle)", "-."),
    "position_residual": ("prefix-distance residual (oracle)", (0, (1, 3))),
}
TABLE_RANKS = (8, 32)
RECORD_KEYS = (
    "job_key",
    "model",
    "dtype",
    "bench",
    "subset",
    "seed",
    "item_id",
    "layer",
    "channel",
)  # one layer-channel


def content(records: pd.DataFrame) -> pd.DataFrame:
    """The records of the content channel (V, c_KV)."""
    return records[records["role"] == "content"] if not records.empty else records


def energy_curves(energy: pd.DataFrame) -> pd.DataFrame:
    """Per (model, layer, rank): mean energy captured over items (content channel)."""
    e = content(energy)
    e = e[e["quantity"] == "energy_captured"]
    return e.groupby(["model", "layer", "rank"], as_index=False)["value"].mean()


def counted_e90(e: pd.DataFrame) -> pd.DataFrame:
    """The e90 records of layer-channels above rounding, by the item's ``above_rounding`` record of the same
    layer-channel (``kamera.metrics.above_rounding``, ``e90_columns``' rule); a record with no flag (written
    before flags existed) counts where e90 > 0 (Δ = 0, the one case below rounding it shows)."""
    e90, flags = e[e["quantity"] == "e90_rank"], e[e["quantity"] == "above_rounding"]
    counted = e90["value"] > 0
    if not flags.empty:
        keys = [c for c in RECORD_KEYS if c in e.columns]
        flag = flags.drop_duplicates(keys).set_index(keys)["value"]
        got = pd.Series(pd.MultiIndex.from_frame(e90[keys]).map(flag), index=e90.index)
        counted = (got > 0).where(got.notna(), counted).astype(bool)
    return e90[counted]


def e90_summary(lay: pd.DataFrame) -> float:
    """A model's median e90 rank: the median over layers above rounding of the per-layer median over items
    (0 when no layer is above rounding: no direction is needed to hold a deficit that is not there)."""
    if "e90" not in lay.columns:
        return float("nan")
    counted = lay["e90_counted"].dropna() if "e90_counted" in lay.columns else pd.Series(dtype=float)
    return float(counted.median()) if not counted.empty else 0.0


def per_layer(norms: pd.DataFrame, energy: pd.DataFrame, landmarks: pd.DataFrame) -> pd.DataFrame:
    """One line per (model, layer): energy at the table's ranks, median e90, mean relative norms, median landmarks."""
    parts = []
    if not energy.empty:
        e = content(energy)
        at = e[(e["quantity"] == "energy_captured") & e["rank"].isin(TABLE_RANKS)]
        at = at.pivot_table(index=["model", "layer"], columns="rank", values="value", aggfunc="mean")
        at.columns = [f"energy_m{int(m)}" for m in at.columns]
        ranks = e[e["quantity"] == "e90_rank"]
        e90 = ranks.groupby(["model", "layer"])["value"].median().rename("e90")
        counted = counted_e90(e).groupby(["model", "layer"])["value"].median().rename("e90_counted")
        parts += [at, e90, counted]
    if not norms.empty:
        cols = [c for c in NORMS if c in norms.columns]
        parts.append(content(norms).groupby(["model", "layer"])[cols].mean())
    if not landmarks.empty:
        lm = landmarks[landmarks["quantity"] == "landmarks"].groupby(["model", "layer"])
        parts += [lm["value"].median().rename("landmarks"), lm["n_a"].median().rename("n_a")]
    if not parts:
        return pd.DataFrame()
    frame = pd.concat(parts, axis=1).reset_index()
    frame["layer"] = frame["layer"].astype(int)
    return frame.sort_values(["model", "layer"]).reset_index(drop=True)


def plot(curves: pd.DataFrame, layers: pd.DataFrame, models: list[str], title: str) -> plt.Figure:
    with plt.style.context(str(STYLE)):
        fig, axes = plt.subplots(len(models), 3, figsize=(7.0, 1.9 * len(models) + 0.3), squeeze=False)
        for row, model in zip(axes, models, strict=True):
            a, b, c = row
            lay = layers[layers["model"] == model] if not layers.empty else layers
            cur = curves[curves["model"] == model] if not curves.empty else curves
            if cur.empty:
                blank(a, "no energy records")
            else:
                n_layers = int(cur["layer"].max()) + 1
                colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, n_layers))
                for layer, g in cur.groupby("layer"):
                    a.plot(g["rank"], g["value"], color=colours[int(layer)], linewidth=0.8)
                e90 = e90_summary(lay)
                if e90 > 0:
                    a.axvline(e90, color="0.3", linestyle=":", linewidth=0.8)
                a.set_xscale("log", base=2)
                a.set_ylim(0, 1.02)
                a.set_ylabel(f"{model}\nenergy captured")
                a.set_xlabel("patch rank m (colour: layer, dark = shallow)")
            if lay.empty or "ratio" not in lay.columns:
                blank(b, "no deficit_norms records")
            else:
                for col, (label, style) in NORMS.items():
                    if col in lay.columns:
                        b.plot(lay["layer"], lay[col], linestyle=style, label=label)
                b.set_xlabel("layer")
                b.set_ylabel("‖·‖_F / ‖KV(B|A)‖_F")
                integer_ticks(b)
            if lay.empty or "landmarks" not in lay.columns:
                blank(c, "no landmarks records")
            else:
                c.plot(lay["layer"], lay["landmarks"], marker="o")
                c.set_xlabel("layer")
                c.set_ylabel("landmark keys of A")
                integer_ticks(c)
        for ax, name in zip(
            axes[0], ("(a) energy vs rank", "(b) relative deficit norm", "(c) landmark keys"), strict=True
        ):
            ax.set_title(name)
        drawn = [ax for ax in axes[:, 1] if ax.lines]
        if drawn:
            drawn[0].legend(loc="upper left", fontsize=5)
        fig.suptitle(title)
        fig.tight_layout()
    return fig


def headline(model: str, lay: pd.DataFrame) -> str:
    """One sentence of the model's numbers (first → last layer)."""
    bits, e90 = [], e90_summary(lay)
    lay = lay.dropna(axis=1, how="all")
    if "ratio" in lay.columns:
        bits.append(
            f"conditioning {cell(lay['ratio'].iloc[0])} (layer 0) → {cell(lay['ratio'].iloc[-1])} "
            f"(layer {lay['layer'].iloc[-1]})"
        )
    if "e90" in lay.columns:
        bits.append(f"median e90 rank {cell(e90)} (layers above rounding)")
    if "landmarks" in lay.columns:
        med = lay["landmarks"].median()
        bits.append(f"median landmark keys {cell(med)} ({cell(100 * med / lay['n_a'].median(), '.2g')}% of A)")
    return f"- **{model}**: " + ("; ".join(bits) if bits else "no records")


def to_markdown(layers: pd.DataFrame, models: list[str], title: str, note: str) -> list[str]:
    lines = [
        f"**{title}** — content channel; energy at m = mean over items, e90 and landmarks = median over items, "
        "norms = mean over items",
        "",
    ]
    lines += [headline(m, layers[layers["model"] == m] if not layers.empty else layers) for m in models]
    cols = [
        ("energy_m8", "energy m=8"),
        ("energy_m32", "energy m=32"),
        ("e90", "e90"),
        *[(c, label) for c, (label, _) in NORMS.items()],
        ("landmarks", "landmarks"),
        ("n_a", "n_A"),
    ]
    for model in models:
        lay = layers[layers["model"] == model] if not layers.empty else layers
        lines += ["", f"*{model}*", ""]
        body = [[str(r["layer"]), *[cell(r.get(c)) for c, _ in cols]] for _, r in lay.iterrows()]
        lines += markdown_rows(["layer", *[label for _, label in cols]], body or [["–"] * (len(cols) + 1)])
    return [*lines, "", note]


def render(
    rows: pd.DataFrame, probes: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    energy = one_label(of_probe(probes, "energy"), "energy")
    norms = one_label(of_probe(probes, "deficit_norms"), "deficit_norms")
    landmarks = one_label(of_probe(probes, "landmarks"), "landmarks")
    models = sorted(set().union(*(f["model"] for f in (energy, norms, landmarks) if not f.empty)))
    if not models:
        raise SystemExit(
            f"{group} has no energy, deficit_norms or landmarks records (probes=[energy, deficit_split, landmarks])"
        )
    curves = energy_curves(energy) if not energy.empty else pd.DataFrame()
    layers = per_layer(norms, energy, landmarks)
    title = f"Fig. 3 ({group}{partial_tag(footer)})"
    fig = plot(curves, layers, models, title)
    md = document(to_markdown(layers, models, title, paper_or(paper, "fig3")["note"]), footer)
    return figure_outputs(fig, md, stem, footer, place="figure")


def main(argv: list[str] | None = None) -> None:
    cli(
        __doc__,
        "fig3",
        lambda exp: render(exp.rows, exp.probes, exp.name, exp.stem("figure"), exp.footer, exp.paper),
        argv,
    )


if __name__ == "__main__":
    main()
