"""Figure 5: KL to re-prefill vs patch rank m ∈ {1, 2, 4, …, 128, full}, one line per model, blind floor dashed;
on MLA the k_pe rank the patch keeps beside it, and App. C.2's plateau rank with its bootstrap CI.

    python -m experiments.fig5 experiment=fig5_tiny

Reads the plain patch rows (all layers, one SVD per layer-channel) and the blind rows of exactly the
experiment's jobs; writes <paths.figures>/<experiment>.pdf (byte-stable) and .png plus a markdown
table of the curve beside it, each with the provenance footer.

**Effective rank.** Each point sits at the rank the patch really had: the ``effective_rank`` of its rows (a
requested m above min(n_B, width) is clamped to full rank), averaged over items. A point clamped on some item
is drawn hollow, and the requested ranks clamped on every item to one effective rank (and k_pe rank) are
drawn once, at the smallest of them (at small n_B the ranks 32 … full would otherwise stack at one x); on
MLA the ranks past the content clamp whose k_pe rank still grows are hollow points off the line, which runs
through one point per effective rank. The table keeps every requested rank with its ``m_eff`` and, where it
differs, its k_pe rank ``r_eff``.

**The k_pe rank on MLA.** The rotary rank that goes with m is a choice the paper does not state: the default
(``auto``) keeps ⌈m/4⌉ of MLA's k_pe band, which gives the paper's byte fractions (docs/metrics.md). The
config sweeps it on the MLA model (arms ``patch_r<m>[rotary_rank=…]``: ⌈m/2⌉ and m) so the figure shows what
the choice costs: one extra line per k_pe rule and MLA model (the bytes over the page in the table). These
arms' rows on GQA / MHA models are left out (there the rotary channel is K, not the k_pe band).

**Plateau (App. C.2).** "rank-32 closes 94% of the KL gap to the rank-64 floor; a held-out split selects the
same plateau (bootstrap 95% CI [32, 128])": per model, m⋆ = the smallest swept rank whose mean KL closes
:data:`kamera.metrics.PLATEAU_SHARE` (0.9) of the gap between blind reuse and the top of the sweep (the full-rank
patch where it ran, else the largest rank; :func:`kamera.metrics.plateau_rank`), so m⋆ can be any swept rank,
128 and full included (a rank-64 reference capped it at 64 on every resample). Its 95% cluster-bootstrap CI
reruns the rule on each resample (inverted-CDF quantiles, so the bounds are ranks of the sweep). Held out: over
200 seeded random halvings of the clusters, m⋆ is selected on one half and the share of the gap it closes is
scored on the other (median selected rank and mean share, each with its 2.5 / 97.5% split quantiles). "Rank 32
closes y of the gap to rank 64" is its own statistic beside it, with its cluster-bootstrap CI. Not chosen: "the
smallest m whose doubling closes < x of the remaining gap" divides differences of KLs that sit at the float floor
past the knee, so its selection is noise there.

Each line is the mean KL over items with its 95% bootstrap band (items sharing a ``cluster_key`` resampled
together, ``kamera.metrics.bootstrap_ci``), and the median beside it (dotted, × markers); the data table gives
both with their CIs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from experiments.common import STYLE, cli, figure_outputs
from experiments.formats import cluster_labels, document, interval, markdown_rows, partial_tag
from experiments.paper import paper_or
from kamera.metrics import PLATEAU_SHARE, bootstrap_ci, bootstrap_draws, gap_closed, plateau_rank

FULL = "full"
AUTO = "auto"
FULL_RANK = math.inf  # the full-rank patch in a sweep of numeric ranks (the top of every sweep that runs it)
SPLIT_SEED = 0
N_SPLITS = 200  # seeded random halvings of the clusters for the held-out selection


def rotary_rule(rotary_rank: object, rank: float) -> str:
    """The k_pe rule of a patch row: "auto" (the family default), "m/2" (⌈m/2⌉), "m", or the fixed rank."""
    if rotary_rank in (None, AUTO) or pd.isna(rank):
        return AUTO if rotary_rank in (None, AUTO) else str(rotary_rank)
    if rotary_rank == rank:
        return "m"
    return "m/2" if rotary_rank == math.ceil(rank / 2) else str(rotary_rank)


def plain_patches(rows: pd.DataFrame) -> pd.DataFrame:
    """The plain patch rows (all layers, one SVD per layer-channel) with ``m`` (requested rank or "full") and
    ``rotary`` (:func:`rotary_rule`); the k_pe variants only on MLA models."""
    params = rows["params"].map(json.loads)
    plain = (rows["arm_name"] == "patch") & params.map(
        lambda p: p.get("layers") == "all" and p.get("granularity") == "layer"
    )
    mla = rows["attention"] == "MLA" if "attention" in rows else pd.Series(False, index=rows.index)
    patch = rows[plain].assign(
        mla=mla[plain],
        m=[FULL if pd.isna(r) else str(int(r)) for r in rows.loc[plain, "rank"]],
        rotary=[
            rotary_rule(p.get("rotary_rank", AUTO), r)
            for p, r in zip(params[plain], rows.loc[plain, "rank"], strict=True)
        ],
    )
    return patch[(patch["rotary"] == AUTO) | (patch["mla"])]


def column_mean(g: pd.DataFrame, column: str) -> float:
    """The mean of ``column`` over ``g``; NaN where the rows do not carry it (hand-built rows, older shards)."""
    return float(g[column].astype(float).mean()) if column in g else math.nan


def curve(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model, subset, k_pe rule, requested m): n items, mean and median KL with their 95% (cluster) bootstrap
    CIs, the mean effective content and rotary ranks, the share of items the rank was clamped on, the mean bytes
    over B's page, and the blind KL."""
    patch = plain_patches(rows)
    out = []
    for (model, subset, rotary, m), g in patch.groupby(["model", "subset", "rotary", "m"]):
        blind = rows[(rows["model"] == model) & (rows["subset"] == subset) & (rows["arm"] == "blind")]["kl"]
        mean, lo, hi = interval(g, "kl")
        median, median_lo, median_hi = interval(g, "kl", np.median)
        clamped = 1.0 if m == FULL else float((g["effective_rank"] < int(m)).mean())
        out.append(
            {
                "model": model,
                "subset": subset,
                "rotary": rotary,
                "m": m,
                "n": g["item_id"].nunique(),
                "kl_mean": mean,
                "kl_lo": lo,
                "kl_hi": hi,
                "kl_median": median,
                "median_lo": median_lo,
                "median_hi": median_hi,
                "m_eff": g["effective_rank"].mean(),
                "r_eff": column_mean(g, "effective_rotary_rank"),
                "clamped": clamped,
                "bytes_frac": column_mean(g, "bytes_frac"),
                "mla": bool(g["mla"].iloc[0]),
                "blind_kl": blind.mean() if len(blind) else math.nan,
            }
        )
    frame = pd.DataFrame(out)
    # one line per model, or per model · subset where a model ran several subsets (its ``base``); a k_pe variant
    # is a line of its own beside its base
    several = frame.groupby("model")["subset"].nunique() > 1
    frame["base"] = [f"{m} · {s}" if several[m] else m for m, s in zip(frame["model"], frame["subset"], strict=True)]
    frame["line"] = [
        b + ("" if r == AUTO else f" · k_pe {r}") for b, r in zip(frame["base"], frame["rotary"], strict=True)
    ]
    frame["order"] = frame["m"].map(lambda m: math.inf if m == FULL else int(m))
    return frame.sort_values(["line", "order"]).drop(columns="order").reset_index(drop=True)


def drawn(g: pd.DataFrame) -> pd.DataFrame:
    """A line's points as drawn: the requested ranks clamped on every item to one effective rank (and k_pe rank)
    merged into the smallest of them, ``label`` naming the requested ranks it stands for."""
    g = g.assign(
        key=[
            (round(e, 6), round(r, 6)) if c == 1 else (m,)
            for e, r, c, m in zip(g["m_eff"], g["r_eff"].fillna(-1), g["clamped"], g["m"], strict=True)
        ]
    )
    labels = g.groupby("key", sort=False)["m"].agg(lambda ms: "=".join(ms) if len(ms) > 1 else "")
    first = g.drop_duplicates("key").copy()
    first["label"] = first["key"].map(labels)
    return first.drop(columns="key")


def plot(frame: pd.DataFrame, title: str) -> plt.Figure:
    with plt.style.context(str(STYLE)):
        fig, ax = plt.subplots()
        ranks = sorted({int(m) for m in frame["m"] if m != FULL})
        bases = sorted(set(frame["base"]))
        for line, g in frame.groupby("line", sort=True):
            main = g["rotary"].iloc[0] == AUTO
            colour = f"C{bases.index(g['base'].iloc[0])}"
            d = drawn(g)
            on_line = d.drop_duplicates("m_eff")  # MLA: past the content clamp only k_pe grows; those points sit off it
            style = (
                {}
                if main
                else {"linestyle": "-." if g["rotary"].iloc[0] == "m/2" else (0, (3, 1, 1, 1, 1, 1)), "linewidth": 0.8}
            )
            ax.plot(on_line["m_eff"], on_line["kl_mean"], color=colour, label=line, **style)
            hollow = d["clamped"] > 0
            for mask, face in ((~hollow, colour), (hollow, "none")):
                ax.scatter(
                    d.loc[mask, "m_eff"],
                    d.loc[mask, "kl_mean"],
                    s=9 if main else 5,
                    facecolors=face,
                    edgecolors=colour,
                    linewidths=0.6,
                    zorder=3,
                )
            if main:
                ax.fill_between(
                    on_line["m_eff"], on_line["kl_lo"], on_line["kl_hi"], color=colour, alpha=0.15, linewidth=0
                )
                ax.plot(on_line["m_eff"], on_line["kl_median"], marker="x", linestyle=":", linewidth=0.8, color=colour)
                ax.axhline(g["blind_kl"].iloc[0], color=colour, linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ranks, list(map(str, ranks)))
        ax.set_xlabel("effective patch rank (hollow: m clamped to min(n_B, width); the table lists which m)")
        ax.set_ylabel("KL to re-prefill (mean, 95% band)")
        ax.set_title(title + " (dotted ×: median; dashed: blind; dash-dot: MLA k_pe at m/2, m)")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


# ----- App. C.2's plateau ----------------------------------------------------------------------------
def sweep_matrix(g: pd.DataFrame) -> tuple[list[float], pd.DataFrame]:
    """One model's plain patch rows (default k_pe rule) as items × ranks KL, columns ascending, the full-rank patch
    last as rank ``inf``; only the items that ran every rank."""
    kl = g.pivot_table(index="item_id", columns="m", values="kl", aggfunc="first")
    ranks = sorted(FULL_RANK if m == FULL else float(m) for m in kl.columns)
    kl = kl[[FULL if m == FULL_RANK else str(int(m)) for m in ranks]].dropna()
    return ranks, kl


def plateau(rows: pd.DataFrame, share: float = PLATEAU_SHARE) -> pd.DataFrame:
    """Per (model, subset), the default k_pe rule only: the plateau rank m⋆ (:func:`kamera.metrics.plateau_rank`)
    against the top of the sweep (the full-rank patch where it ran, else the largest rank), over the items with
    every swept rank and blind reuse, its 95% cluster-bootstrap CI, the share of the gap it closes, the held-out
    selection (:func:`held_out`), and "rank 32 closes y of the gap to rank 64" (module docstring)."""
    patch = plain_patches(rows)
    out = []
    for (model, subset), g in patch[patch["rotary"] == AUTO].groupby(["model", "subset"], sort=True):
        ranks, kl = sweep_matrix(g)
        blind = rows[(rows["model"] == model) & (rows["subset"] == subset) & (rows["arm"] == "blind")]
        blind = blind.drop_duplicates("item_id").set_index("item_id")["kl"]
        kl = kl[kl.index.isin(blind.index)]
        if len(ranks) < 2 or kl.empty:
            continue
        ref = ranks[-1]
        matrix, floor = kl.to_numpy(), blind.loc[kl.index].to_numpy()
        items = g.drop_duplicates("item_id").set_index("item_id").loc[kl.index].reset_index()
        clusters = cluster_labels(items)

        def select(idx: np.ndarray, m=matrix, f=floor, r=ranks, ref=ref) -> float:
            return plateau_rank(r, m[idx.astype(int)], f[idx.astype(int)], ref, share)

        def closes(idx: np.ndarray, rank: float, m=matrix, f=floor, r=ranks, ref=ref) -> float:
            means = m[idx.astype(int)].mean(axis=0)
            return gap_closed(means[r.index(rank)], f[idx.astype(int)].mean(), means[r.index(ref)])

        star, draws = bootstrap_draws(np.arange(len(kl)), select, clusters=clusters)
        draws = draws[~np.isnan(draws)]
        lo, hi = np.quantile(draws, [0.025, 0.975], method="inverted_cdf") if draws.size else (math.nan, math.nan)
        everyone = np.arange(len(kl))
        fit, held = held_out(clusters, select, closes)

        def r32_of(idx: np.ndarray, m=matrix, f=floor, r=ranks) -> float:
            return pair_gap(r, m[idx.astype(int)], f[idx.astype(int)])

        r32 = bootstrap_ci(everyone, r32_of, clusters=clusters) if {32.0, 64.0} <= set(ranks) else (math.nan,) * 3
        out.append(
            {
                "model": model,
                "subset": subset,
                "n": len(kl),
                "clusters": len(set(clusters)),
                "ref": ref,
                "m_star": star,
                "lo": lo,
                "hi": hi,
                "closed": closes(everyone, star) if not math.isnan(star) else math.nan,
                "fit_star": fit[0],
                "fit_lo": fit[1],
                "fit_hi": fit[2],
                "held_closed": held[0],
                "held_lo": held[1],
                "held_hi": held[2],
                "r32": r32[0],
                "r32_lo": r32[1],
                "r32_hi": r32[2],
            }
        )
    return pd.DataFrame(out)


def pair_gap(ranks: list[float], kl: np.ndarray, kl_blind: np.ndarray, low: float = 32.0, high: float = 64.0) -> float:
    """The share of the gap from blind reuse to the rank-``high`` patch that the rank-``low`` patch closes (App. C.2:
    "rank-32 closes 94% of the KL gap to the rank-64 floor"), on mean KL."""
    means = kl.mean(axis=0)
    return gap_closed(means[ranks.index(low)], float(kl_blind.mean()), means[ranks.index(high)])


def held_out(clusters: list[str], select, closes, n_splits: int = N_SPLITS) -> tuple[tuple, tuple]:
    """Selection on one half of the clusters, scored on the other, over ``n_splits`` seeded random halvings:
    ((median m⋆ selected on the fit half, its 2.5 / 97.5% split quantiles), (mean share of the gap the fit half's
    m⋆ closes on the held-out half, its 2.5 / 97.5% split quantiles)). Ranks are quantiled by inverted CDF, so the
    bounds are ranks of the sweep."""
    names = list(dict.fromkeys(clusters))
    if len(names) < 2:
        return (math.nan,) * 3, (math.nan,) * 3
    rng = np.random.default_rng(SPLIT_SEED)
    labels = np.array([names.index(c) for c in clusters])
    stars, shares = [], []
    for _ in range(n_splits):
        fit_names = rng.permutation(len(names))[: (len(names) + 1) // 2]
        mask = np.isin(labels, fit_names)
        fit, held = np.flatnonzero(mask), np.flatnonzero(~mask)
        star = select(fit)
        if math.isnan(star):
            continue
        stars.append(star)
        shares.append(closes(held, star))
    if not stars:
        return (math.nan,) * 3, (math.nan,) * 3
    s, c = np.array(stars), np.array(shares, dtype=float)
    c = c[~np.isnan(c)]
    rank_q = tuple(float(x) for x in np.quantile(s, [0.5, 0.025, 0.975], method="inverted_cdf"))
    share_q = (float(c.mean()), *np.quantile(c, [0.025, 0.975])) if c.size else (math.nan,) * 3
    return rank_q, share_q


def rank_text(m: float) -> str:
    if m is None or math.isnan(m):
        return "–"
    return FULL if math.isinf(m) else str(int(m))


def share_text(v: float, lo: float = math.nan, hi: float = math.nan) -> str:
    if math.isnan(v):
        return "–"
    return f"{v:.2f}" + ("" if math.isnan(lo) else f" [{lo:.2f}, {hi:.2f}]")


def plateau_lines(table: pd.DataFrame, share: float = PLATEAU_SHARE) -> list[str]:
    if table.empty:
        return ["", "*Plateau (App. C.2)*: no model ran two ranks or more with blind reuse"]
    body = [
        [
            r.model if table["model"].value_counts()[r.model] == 1 else f"{r.model} · {r.subset}",
            r.n,
            r.clusters,
            rank_text(r.ref),
            f"{rank_text(r.m_star)} [{rank_text(r.lo)}, {rank_text(r.hi)}]",
            share_text(r.closed),
            f"{rank_text(r.fit_star)} [{rank_text(r.fit_lo)}, {rank_text(r.fit_hi)}]",
            share_text(r.held_closed, r.held_lo, r.held_hi),
            share_text(r.r32, r.r32_lo, r.r32_hi),
        ]
        for r in table.itertuples(index=False)
    ]
    head = [
        "model",
        "n",
        "clusters",
        "ref rank",
        "m⋆ [95% CI]",
        "closed at m⋆",
        "m⋆ on fit half [split 95%]",
        "closed on held-out half [split 95%]",
        "rank 32 closes of the gap to 64 [95% CI]",
    ]
    return [
        "",
        f"*Plateau (App. C.2)*: m⋆ = the smallest swept rank whose mean KL closes ≥ {share:.0%} of the gap "
        "from blind reuse to the top of the sweep (ref rank: the full-rank patch where it ran, else the largest "
        "rank), so m⋆ can be any swept rank; CI: the rule rerun on 2000 cluster-bootstrap resamples; held out: "
        f"{N_SPLITS} seeded random halvings of the clusters, m⋆ selected on one half and the share of the gap it "
        "closes scored on the other; rank 32 → 64: the share of the blind → rank-64 gap rank 32 closes (mean "
        "KL), its own statistic",
        "",
        *markdown_rows(head, body),
    ]


def cell(kl: float, lo: float, hi: float, m: str, m_eff: float, r_eff: float = math.nan) -> str:
    """'3.6e-15 [3.3e-15, 3.8e-15]', with the effective rank beside it where the patch was clamped below m (and
    for full), and the k_pe rank where the row reports one."""
    clamped = m == FULL or not math.isclose(m_eff, int(m))
    extra = [f"m_eff {m_eff:.3g}"] if clamped else []
    if not math.isnan(r_eff) and (m == FULL or not math.isclose(r_eff, m_eff)):
        extra.append(f"r_eff {r_eff:.3g}")
    return f"{kl:.2e} [{lo:.2e}, {hi:.2e}]" + (f" ({', '.join(extra)})" if extra else "")


def to_markdown(
    frame: pd.DataFrame, group: str, footer: str = "", paper: dict | None = None, plateaus: pd.DataFrame | None = None
) -> str:
    ranks = list(
        dict.fromkeys(frame.sort_values("m", key=lambda s: s.map(lambda m: math.inf if m == FULL else int(m)))["m"])
    )
    lines = [
        f"**Figure 5 ({group})** — KL to re-prefill by patch rank, mean and median over items, each with its "
        "95% bootstrap CI (clusters of items resampled together); blind = no patch; m_eff = the mean rank "
        "actually applied where it is below m, r_eff = the mean k_pe (rotary) rank where it differs"
    ]
    for stat, col, lo, hi in (("mean", "kl_mean", "kl_lo", "kl_hi"), ("median", "kl_median", "median_lo", "median_hi")):
        lines += [
            "",
            f"{stat} [95% CI]:",
            "",
            "| model | n | blind | " + " | ".join(f"m={m}" for m in ranks) + " |",
            "|---" * (3 + len(ranks)) + "|",
        ]
        for line, g in frame.groupby("line", sort=True):
            r_eff = g["r_eff"] if g["mla"].iloc[0] else [math.nan] * len(g)
            cells = {
                m: cell(k, a, b, m, e, r)
                for m, k, a, b, e, r in zip(g["m"], g[col], g[lo], g[hi], g["m_eff"], r_eff, strict=True)
            }
            lines.append(
                f"| {line} | {int(g['n'].max())} | {g['blind_kl'].iloc[0]:.2e} | "
                + " | ".join(cells.get(m, "–") for m in ranks)
                + " |"
            )
    variants = frame[frame["mla"]]
    if (variants["rotary"] != AUTO).any():
        lines += [
            "",
            "*MLA k_pe rank (auto = ⌈m/4⌉, the default): bytes over B's page, mean over items*",
            "",
            "| model | k_pe | " + " | ".join(f"m={m}" for m in ranks) + " |",
            "|---" * (2 + len(ranks)) + "|",
        ]
        for (model, rotary), g in variants.groupby(["model", "rotary"], sort=True):
            got = dict(zip(g["m"], g["bytes_frac"], strict=True))
            lines.append(
                f"| {model} | {rotary} | " + " | ".join(f"{got[m]:.3f}" if m in got else "–" for m in ranks) + " |"
            )
    if plateaus is not None:
        lines += plateau_lines(plateaus)
    lines.append(f"\n{paper_or(paper, 'fig5')['note']}")
    return document(lines, footer)


def render(
    rows: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    frame = curve(rows)
    if frame.empty:
        raise SystemExit(f"{group} has no plain patch rows (arms patch_r<m> / patch_full)")
    md = to_markdown(frame, group, footer, paper, plateau(rows))
    return figure_outputs(plot(frame, f"Fig. 5 ({group}{partial_tag(footer)})"), md, stem, footer)


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "fig5", lambda exp: render(exp.rows, exp.name, exp.stem("figure"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
