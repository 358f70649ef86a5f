"""Figure 5: KL to re-prefill vs patch rank m ∈ {1, 2, 4, …, 128, full}, one line per model, blind floor dashed.

    python experiments/fig5.py --group fig5_tiny

Reads the patch rows (all layers, one SVD per layer-channel) and the blind rows of the group; writes
figures/<group>.pdf (byte-stable) and .png plus a markdown table of the curve beside it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from experiments.common import (
    PAPER_FIG5_MLA_BLIND_FLOOR,
    ROOT,
    STYLE,
    cli,
    publish,
    read_rows,
    save_figure,
    write_text,
)

FULL = "full"


def curve(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean / median KL per (model, subset, rank) over the plain patch arms, and the matching blind KL."""
    params = rows["params"].map(json.loads)
    plain = (rows["arm_name"] == "patch") & params.map(lambda p: p.get("layers") == "all" and p.get("granularity") == "layer")
    patch = rows[plain].assign(m=[FULL if pd.isna(r) else str(int(r)) for r in rows.loc[plain, "rank"]])
    out = []
    for (model, subset, m), g in patch.groupby(["model", "subset", "m"]):
        blind = rows[(rows["model"] == model) & (rows["subset"] == subset) & (rows["arm"] == "blind")]["kl"]
        out.append({"model": model, "subset": subset, "m": m, "n": len(g), "kl_mean": g["kl"].mean(),
                    "kl_median": g["kl"].median(), "blind_kl": blind.mean() if len(blind) else math.nan})
    frame = pd.DataFrame(out)
    # one line per model, or per model · subset where a model ran several subsets
    several = frame.groupby("model")["subset"].nunique() > 1
    frame["line"] = [f"{m} · {s}" if several[m] else m for m, s in zip(frame["model"], frame["subset"], strict=True)]
    frame["order"] = frame["m"].map(lambda m: math.inf if m == FULL else int(m))
    return frame.sort_values(["line", "order"]).drop(columns="order").reset_index(drop=True)


def plot(frame: pd.DataFrame, title: str) -> plt.Figure:
    with plt.style.context(str(STYLE)):
        fig, ax = plt.subplots()
        ranks = sorted({int(m) for m in frame["m"] if m != FULL})
        full_x = 2 * ranks[-1] if ranks else 1
        for i, (line, g) in enumerate(frame.groupby("line", sort=True)):
            colour = f"C{i}"
            x = [full_x if m == FULL else int(m) for m in g["m"]]
            ax.plot(x, g["kl_mean"], marker="o", color=colour, label=line)
            ax.axhline(g["blind_kl"].iloc[0], color=colour, linestyle="--", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks([*ranks, full_x], [*map(str, ranks), FULL])
        ax.set_xlabel("patch rank m")
        ax.set_ylabel("KL to re-prefill (mean over items)")
        ax.set_title(title + " (dashed: blind reuse)")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def to_markdown(frame: pd.DataFrame, group: str) -> str:
    lines = [f"**Figure 5 ({group})** — mean KL to re-prefill by patch rank; blind = no patch",
             "", "| model | n | blind | " + " | ".join(f"m={m}" for m in frame["m"].unique()) + " |"]
    lines.append("|---" * (3 + frame["m"].nunique()) + "|")
    for line, g in frame.groupby("line", sort=True):
        cells = dict(zip(g["m"], g["kl_mean"], strict=True))
        lines.append(f"| {line} | {int(g['n'].max())} | {g['blind_kl'].iloc[0]:.2e} | "
                     + " | ".join(f"{cells[m]:.2e}" if m in cells else "–" for m in frame["m"].unique()) + " |")
    lines.append(f"\nPaper (Fig. 5): knee at m ≈ 8–16, plateau by m ≈ 32; MLA blind floor {PAPER_FIG5_MLA_BLIND_FLOOR}.")
    return "\n".join(lines) + "\n"


def render(rows: pd.DataFrame, group: str, stem: Path) -> tuple[str, list[Path]]:
    frame = curve(rows)
    if frame.empty:
        raise SystemExit(f"group {group} has no plain patch rows (arms patch_r<m> / patch_full)")
    md = to_markdown(frame, group)
    return md, [*save_figure(plot(frame, f"Fig. 5 ({group})"), stem), write_text(stem.with_suffix(".md"), md)]


def main() -> None:
    args = cli(__doc__.split("\n\n")[0], "fig5")
    stem = Path(args.out) if args.out else ROOT / "figures" / args.group
    md, paths = render(read_rows(args.results, args.group), args.group, stem)
    print(md)
    publish(args, paths)


if __name__ == "__main__":
    main()
