"""Table 3: MM-NIAH accuracy per model × subset × arm, with bootstrap CIs, the chance row and n.

    python -m experiments.table3 experiment=table3        # paper scale (paper values printed beside ours)
    python -m experiments.table3 experiment=table3_tiny   # tiny scale (toy binding model + tiny families)

Reads exactly the experiment's jobs (``experiments.common.load``); writes <paths.tables>/<experiment>.md
and .tex (booktabs), each with the provenance footer, and prints the markdown.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from experiments.common import PAPER_TABLE3, ci_cell, load, publish, write_text

ARM_ORDER = ["reprefill", "blind", "patch_r16", "patch_r64"]


def aggregate(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per (model, subset, arm): n, accuracy and its 95% CI cell; chance per (model, subset)."""
    out = []
    for (model, subset, arm), g in rows.groupby(["model", "subset", "arm"], sort=True):
        out.append({
            "model": model, "subset": subset, "arm": arm, "n": len(g),
            "accuracy": g["correct"].mean(), "cell": ci_cell(g["correct"]),
            "chance": (1.0 / g["n_choices"][g["n_choices"] > 0]).mean(),
            "paper": PAPER_TABLE3.get((model, subset), {}).get(arm),
        })
    return pd.DataFrame(out)


def arm_order(arms) -> list[str]:
    """The paper's arms first, then the rest in natural order (patch_r1 < patch_r8 < patch_r128)."""
    def natural(a: str) -> list:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", a.replace("_full", "_r1000000"))]

    rest = sorted(set(arms) - set(ARM_ORDER), key=natural)
    return [a for a in ARM_ORDER if a in set(arms)] + rest


def wide(agg: pd.DataFrame) -> pd.DataFrame:
    """Arms × (model, subset) cells, paper values beside ours where they exist, chance / n last."""
    cols = sorted({(m, s) for m, s in zip(agg["model"], agg["subset"], strict=True)})
    table = {}
    for col in cols:
        g = agg[(agg["model"] == col[0]) & (agg["subset"] == col[1])].set_index("arm")
        cells = {a: g.at[a, "cell"] + (f" (paper {g.at[a, 'paper']:.2f})" if pd.notna(g.at[a, "paper"]) else "")
                 for a in g.index}
        cells["chance / n"] = f"{g['chance'].iloc[0]:.2f} / {int(g['n'].max())}"
        table[col] = cells
    frame = pd.DataFrame(table)
    frame = frame.reindex([*arm_order(agg["arm"].unique()), "chance / n"])
    frame.columns = pd.MultiIndex.from_tuples(cols, names=["model", "subset"])
    return frame.fillna("–")


def to_markdown(frame: pd.DataFrame, title: str, footer: str = "") -> str:
    head = "| arm | " + " | ".join(f"{m} · {s}" for m, s in frame.columns) + " |"
    sep = "|---" * (len(frame.columns) + 1) + "|"
    body = ["| " + " | ".join([str(arm), *map(str, row)]) + " |" for arm, row in frame.iterrows()]
    tail = ["", f"_{footer}_"] if footer else []
    return "\n".join([f"**{title}** — accuracy, mean [95% bootstrap CI]", "", head, sep, *body, *tail]) + "\n"


def to_latex(frame: pd.DataFrame, caption: str, label: str, footer: str = "") -> str:
    styler = frame.style.format(escape="latex").format_index(escape="latex", axis=0).format_index(escape="latex", axis=1)
    tex = styler.to_latex(
        hrules=True, caption=caption, label=label, column_format="l" + "c" * len(frame.columns),
        multicol_align="c", position_float="centering",
    )
    return f"% {footer}\n{tex}" if footer else tex


def render(rows: pd.DataFrame, group: str, stem: Path, footer: str = "") -> tuple[str, list[Path]]:
    frame = wide(aggregate(rows))
    partial = ", partial" if footer.startswith("PARTIAL") else ""
    md = to_markdown(frame, f"Table 3 ({group}{partial})", footer)
    tex = to_latex(frame, f"Accuracy per arm ({group}{partial}); mean and 95\\% bootstrap CI over items.",
                   f"tab:{group}", footer)
    return md, [write_text(stem.with_suffix(".md"), md), write_text(stem.with_suffix(".tex"), tex)]


def main(argv: list[str] | None = None) -> None:
    exp = load(__doc__.split("\n\n")[0], "table3", argv)
    md, paths = render(exp.rows, exp.name, exp.stem("table"), exp.footer)
    print(md)
    publish(exp, paths)


if __name__ == "__main__":
    main()
