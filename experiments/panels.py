"""What the diagnostic figures (Figs. 3, 4, 8, 11, 12) share: picking a probe's records, empty panels,
markdown tables, source experiments, and the render → files → print plumbing.

A diagnostic figure is a pure function of stored rows and probe records (``experiments.common.load``
gives both); each renderer here has the same shape:

    render(rows, probes, group, stem, footer) -> (markdown, [pdf, png, md])

so golden tests call it on fixed frames and ``main`` calls it on an experiment's stored data. A panel
whose records are missing is drawn as an empty panel that says so (the markdown says so too), never
silently dropped; a figure with no data for any panel is an error.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from experiments.common import Experiment, footer, load, parse, publish, save_figure, write_text
from kamera.job.store import ShardCorruptError
from kamera.sweep import SweepError
from kamera.sweep.status import sweep_jobs

Renderer = Callable[[pd.DataFrame, pd.DataFrame, str, Path, str], tuple[str, list[Path]]]


def of_probe(probes: pd.DataFrame, name: str) -> pd.DataFrame:
    """The records of the registered probe ``name`` (whatever its conf label), without the columns that
    only other probes fill; empty if there are none."""
    if probes.empty or "knobs" not in probes.columns:
        return pd.DataFrame()
    names = probes["knobs"].map(lambda k: json.loads(k).get("name"))
    picked = probes[names == name]
    return picked.dropna(axis=1, how="all").reset_index(drop=True)


def one_label(records: pd.DataFrame, what: str) -> pd.DataFrame:
    """``records`` if they come from one probe configuration; an error naming the labels otherwise
    (averaging records of different knobs would mix measurements)."""
    if records.empty:
        return records
    labels = sorted(records["probe"].unique())
    if len(labels) > 1:
        raise SystemExit(f"{what}: records of several probe configurations {labels}; render one (set probes=[...])")
    return records


def blank(ax: plt.Axes, text: str) -> None:
    """An empty panel that says why it is empty."""
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=6, transform=ax.transAxes, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def cell(x: float | None, spec: str = ".3g") -> str:
    """A number for a markdown cell; '–' for a missing one."""
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Markdown table lines."""
    return ["| " + " | ".join(header) + " |", "|---" * len(header) + "|",
            *["| " + " | ".join(map(str, r)) + " |" for r in rows]]


def partial_suffix(footer_line: str) -> str:
    return ", partial" if footer_line.startswith("PARTIAL") else ""


def finish(fig: plt.Figure, lines: list[str], stem: Path, footer_line: str) -> tuple[str, list[Path]]:
    """Write the figure (PDF byte-stable, PNG) with the footer in small type under the whole grid of
    panels, and its markdown (``lines`` plus the footer)."""
    if footer_line:
        fig.text(0.5, 0.0, "\n".join(textwrap.wrap(footer_line, 160)), ha="center", va="top", fontsize=4)
    md = "\n".join([*lines, *([f"\n_{footer_line}_"] if footer_line else [])]) + "\n"
    return md, [*save_figure(fig, stem), write_text(stem.with_suffix(".md"), md)]


def integer_ticks(ax: plt.Axes) -> None:
    """Integer ticks on the x axis (layers)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def main_for(doc: str, default_experiment: str, render: Renderer, argv: list[str] | None = None) -> Experiment:
    """``python -m experiments.<fig> experiment=…``: load the experiment, render, print the markdown."""
    exp = load(doc.split("\n\n")[0], default_experiment, argv)
    md, paths = render(exp.rows, exp.probes, exp.name, exp.stem("figure"), exp.footer)
    print(md)
    publish(exp, paths)
    return exp


# ----- source experiments -----------------------------------------------------------------------
@dataclass
class Sources:
    """Rows read from other experiments (a panel drawn from another table's sweep)."""

    names: list[str]
    rows: pd.DataFrame
    footer: str


# Overrides a source experiment shares with the figure that reads it: where results live and the
# selection keys every experiment has (``make paper-all ARGS='n_items=16'`` ran every sweep with them).
SHARED_OVERRIDES = ("n_items", "seed", "canonical_context", "eta_floor", "max_new_tokens")


def load_sources(exp: Experiment, names: Sequence[str], argv: list[str] | None = None) -> Sources:
    """The rows of the experiments ``names``, each expanded from its own config and read from ``exp``'s
    results root; SystemExit naming the experiment and what to run when one does not exist, has no
    stored rows, or (without ``--allow-partial``) has incomplete jobs.

    Of the figure's command-line overrides only ``paths.*`` and the shared selection keys
    (:data:`SHARED_OVERRIDES`) are carried over: a source is otherwise read as its own sweep ran
    (``make <source> SCALE=…``), not with the figure's sweep keys."""
    if not names:
        return Sources([], pd.DataFrame(), "")
    args = parse("", exp.name, argv)
    keys = [o.split("=", 1)[0].lstrip("+~") for o in args.overrides]
    carried = [o for o, k in zip(args.overrides, keys, strict=True) if k in SHARED_OVERRIDES or k.startswith("paths.")]
    root = exp.jobs[0].cfg.paths.results
    frames, jobs, incomplete = [], [], []
    for name in names:
        try:
            views = sweep_jobs([f"experiment={name}", *carried])
        except (SweepError, ValueError) as err:
            raise SystemExit(f"{exp.name} reads rows from experiment {name!r}, which does not compose: {err}") from None
        stored = [v for v in views if v.shard is not None]
        if not stored:
            raise SystemExit(f"{exp.name} reads rows from experiment {name}, which has no stored jobs under {root}: "
                             f"run its sweep first (python -m kamera.run -m experiment={name})")
        for v in views:
            if v.error or not v.state.complete:
                incomplete.append(f"{name}: {' '.join(v.overrides)}: {v.error or v.state.summary()}")
        try:
            frames += [v.rows() for v in stored if not v.error]
        except ShardCorruptError as err:
            raise SystemExit(str(err)) from None
        jobs += [v for v in stored if not v.error]
    if incomplete and not args.allow_partial:
        raise SystemExit(f"{exp.name}: {len(incomplete)} job(s) of its source experiments incomplete (run them, or "
                         "render with --allow-partial):\n- " + "\n- ".join(incomplete))
    rows = pd.concat([f for f in frames if not f.empty], ignore_index=True) if any(not f.empty for f in frames) \
        else pd.DataFrame()
    return Sources(list(names), rows, f"sources {', '.join(names)}: " + footer(jobs, incomplete))
