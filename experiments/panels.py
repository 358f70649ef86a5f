"""What the diagnostic figures (Figs. 3, 4, 8, 11, 12) share: picking a probe's records, empty panels,
number cells and source experiments, and the tables' statement of their item selection (the files, markdown and ``main``
are :mod:`experiments.common`'s).

A panel whose records are missing is drawn as an empty panel that says so (the markdown says so too),
never silently dropped; a figure with no data for any panel is an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from experiments.common import Experiment, footer, parse
from kamera.job.store import ShardCorruptError
from kamera.sweep import SweepError
from kamera.sweep.status import sweep_jobs


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


def selection_note(exp: Experiment) -> str:
    """'Items: <the config's selection_rule> (cap n_items = 64).' for the tables whose n per model is the paper's
    valid items (Tables 3 and 7), or '' when the config states no rule."""
    cfg = exp.jobs[0].cfg
    rule = cfg.get("selection_rule")
    return f"Items: {rule} (cap n_items = {cfg.n_items})." if rule else ""


def blank(ax: plt.Axes, text: str) -> None:
    """An empty panel that says why it is empty."""
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=6, transform=ax.transAxes, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def cell(x: float | None, spec: str = ".3g") -> str:
    """A number for a markdown cell; '–' for a missing one."""
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def integer_ticks(ax: plt.Axes) -> None:
    """Integer ticks on the x axis (layers)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


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
            raise SystemExit(
                f"{exp.name} reads rows from experiment {name}, which has no stored jobs under {root}: "
                f"run its sweep first (python -m kamera.run -m experiment={name})"
            )
        for v in views:
            if v.error or not v.state.complete:
                incomplete.append(f"{name}: {' '.join(v.overrides)}: {v.error or v.state.summary()}")
        try:
            frames += [v.rows() for v in stored if not v.error]
        except ShardCorruptError as err:
            raise SystemExit(str(err)) from None
        jobs += [v for v in stored if not v.error]
    if incomplete and not args.allow_partial:
        raise SystemExit(
            f"{exp.name}: {len(incomplete)} job(s) of its source experiments incomplete (run them, or "
            "render with --allow-partial):\n- " + "\n- ".join(incomplete)
        )
    rows = (
        pd.concat([f for f in frames if not f.empty], ignore_index=True)
        if any(not f.empty for f in frames)
        else pd.DataFrame()
    )
    return Sources(list(names), rows, f"sources {', '.join(names)}: " + footer(jobs, incomplete))
