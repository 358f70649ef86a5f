"""What every table and figure shares: exactly the experiment's rows, a provenance footer and byte-stable output.

A renderer is ``experiments/<name>.py``: one ``render(…)`` (a pure function of rows, probe records and the
paper's values, returning its markdown and the paths it wrote) and ``main = cli(__doc__, "<name>", draw)``.
It formats cells and tables with :mod:`experiments.formats` (CI cells, :func:`~experiments.formats.markdown_table`
/ ``markdown_rows`` / ``document``, ``latex_table``, ``partial_tag``: the title's ", partial") and writes files
through :func:`table_outputs` and :func:`figure_outputs` here. The paper's values it prints come from the
experiment's ``paper:`` block (``conf/experiment/<name>.yaml``; the composed config's ``paper`` key, see
:func:`experiments.paper.paper_values`); ``python -m experiments.common --docs`` writes them into
docs/reproduction.md and the README's artefact map (:mod:`experiments.artefact_map`).

A renderer reads the jobs of its experiment as Hydra expands them with the same overrides the sweep
ran with (:func:`kamera.sweep.status.sweep_jobs`), from the results root the runner resolves
(``paths.results``: KAMERA_RESULTS, else ``results/raw`` under the working directory), and counts
each (model, item, arm) once per cell, however many jobs of the sweep selected the item
(:func:`once_per_cell`). An incomplete job fails the render, naming it and its k / n,
unless ``--allow-partial`` (the output then says "partial"); so do rows of one arm in one cell
made by different code versions (:func:`mixed_versions`), unless ``--allow-mixed-versions``. Every
output carries a footer: the commit (and whether it was dirty), package versions, device and dtype its
rows came from, and the data copy (its root; "generated" for a benchmark without files) and checkpoint
fingerprint its jobs read: exactly those the overrides name (:func:`kamera.sweep.status.names_this`),
never another copy's shard.

    python -m experiments.common experiment=table3_tiny [overrides…] [--allow-partial]   # make render EXP=…
    python experiments/table3.py experiment=table3_tiny [overrides…] [--allow-partial] [--out STEM]
    python -m experiments.common --docs [--check]   # docs/reproduction.md's paper values from the paper: blocks

Tables and figures are pure functions of the rows; nothing here loads a model or runs a forward.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from omegaconf import OmegaConf

from experiments.artefact_map import docs
from experiments.formats import latex_table, markdown_table
from experiments.paper import arm_labels, paper_prose
from kamera.job import config_identity
from kamera.job.store import STAMP, ShardCorruptError, StoreWriteError, atomic_write_text, staged
from kamera.provenance import digest
from kamera.run.signals import terminate_as_exit
from kamera.run.track import Tracker
from kamera.sweep import SweepError, compose_config
from kamera.sweep.status import JobView, sweep_jobs

STYLE = Path(__file__).resolve().parent / "paper.mplstyle"
FULL_WIDTH = 6.75  # inches: a multi-panel figure spans two of the style's 3.25 in columns and the gap between
ERRORBAR = {"elinewidth": 0.6, "capsize": 1.0, "capthick": 0.6}  # error bars of bar charts (95% CIs)


@dataclass
class Experiment:
    """An experiment's stored results, ready to render."""

    name: str  # the experiment's group
    jobs: list[JobView]
    rows: pd.DataFrame
    probes: pd.DataFrame
    partial: list[str]  # the incomplete jobs, one line each (empty unless --allow-partial)
    footer: str
    tables: Path  # paths.tables and paths.figures, as the config resolves them
    figures: Path
    out: Path | None
    tracking: str
    paper: dict  # the composed config's paper: block (the paper's values; {} without one)
    arms: list[str]  # the composed config's arms, as labels: the order the renderer lists them in (arm_order)
    overrides: list[str] = field(default_factory=list)  # the overrides it was loaded with, and the flags
    allow_partial: bool = False
    allow_mixed_versions: bool = False

    def stem(self, kind: str) -> Path:
        """Where an output goes: ``--out`` if given, else <paths.tables | paths.figures>/<experiment>."""
        return self.out or (self.tables if kind == "table" else self.figures) / self.name


def parse(description: str, default_experiment: str, argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument(
        "overrides", nargs="*", help=f"Hydra overrides of the sweep (default experiment={default_experiment})"
    )
    ap.add_argument("--allow-partial", action="store_true", help="render incomplete jobs too; the output says partial")
    ap.add_argument(
        "--allow-mixed-versions",
        action="store_true",
        help="render rows of one arm in one cell made by different code versions (refused by default)",
    )
    ap.add_argument("--out", default=None, help="output stem (default: <paths.tables or paths.figures>/<experiment>)")
    modes = ["disabled", "offline", "online"]
    ap.add_argument(
        "--tracking",
        default=os.environ.get("KAMERA_TRACKING") or "disabled",
        choices=modes,
        help="also log the outputs to wandb (default: $KAMERA_TRACKING, else disabled)",
    )
    args = ap.parse_intermixed_args(argv)
    if args.tracking not in modes:  # argparse checks choices on given values only, not on the default
        ap.error(f"KAMERA_TRACKING must be one of {', '.join(modes)}, got {args.tracking!r}")
    if not any(o.split("=", 1)[0].lstrip("+~") == "experiment" for o in args.overrides):
        args.overrides.insert(0, f"experiment={default_experiment}")
    return args


def load(description: str, default_experiment: str, argv: list[str] | None = None) -> Experiment:
    """The experiment's jobs and rows; SystemExit naming every incomplete job unless --allow-partial."""
    args = parse(description, default_experiment, argv)
    return collect(
        args.overrides,
        args.allow_partial,
        args.allow_mixed_versions,
        Path(args.out) if args.out else None,
        args.tracking,
    )


def collect(
    overrides: list[str],
    allow_partial: bool = False,
    allow_mixed_versions: bool = False,
    out: Path | None = None,
    tracking: str = "disabled",
    jobs: list[JobView] | None = None,
) -> Experiment:
    """The jobs of the sweep ``overrides`` describes and their rows (:func:`load`'s refusals; ``jobs``: already
    expanded)."""
    try:
        jobs = sweep_jobs(overrides) if jobs is None else jobs
    except (SweepError, ValueError) as err:
        raise SystemExit(f"cannot expand {' '.join(overrides)}: {err}") from None
    if not jobs:
        raise SystemExit(f"{' '.join(overrides)} expands to no job")
    cfg = jobs[0].cfg
    unique = list({j.key: j for j in jobs}.values())  # a sweep listing one job twice counts it once
    incomplete = [
        f"{' '.join(j.overrides)}: {'corrupt: ' + j.error if j.error else j.state.summary()}"
        for j in unique
        if j.error or not j.state.complete
    ]
    if incomplete and not allow_partial:
        raise SystemExit(
            f"{cfg.group}: {len(incomplete)} of {len(unique)} job(s) incomplete (run the sweep, see python -m "
            "kamera.sweep.status, or render with --allow-partial):\n- " + "\n- ".join(incomplete)
        )
    try:
        readable = [j for j in unique if not j.error]
        frames = {"arm": [(j, j.rows()) for j in readable], "probe": [(j, j.probe_records()) for j in readable]}
    except ShardCorruptError as err:
        raise SystemExit(str(err)) from None
    mixed = [line for column, found in frames.items() for line in mixed_versions(found, column)]
    if mixed and not allow_mixed_versions:
        raise SystemExit(
            f"{cfg.group}: rows of one arm in one cell come from different code versions (rerun the "
            "sweep to recompute the stale ones, or render with --allow-mixed-versions):\n- " + "\n- ".join(mixed)
        )
    rows, probes = once_per_cell(frames["arm"], "arm"), once_per_cell(frames["probe"], "probe")
    if rows.empty and probes.empty:
        raise SystemExit(f"{cfg.group}: no stored rows for its {len(unique)} job(s) under {cfg.paths.results}")
    paper = paper_prose(OmegaConf.to_container(cfg.paper, resolve=True)) if cfg.get("paper") is not None else {}
    return Experiment(
        cfg.group,
        unique,
        rows,
        probes,
        incomplete,
        footer(readable, incomplete),
        Path(cfg.paths.tables),
        Path(cfg.paths.figures),
        out,
        tracking,
        paper,
        arm_labels(cfg.get("arms")),
        list(overrides),
        allow_partial,
        allow_mixed_versions,
    )


def companion(exp: Experiment, key: str) -> Experiment | None:
    """The experiment the config key ``key`` of ``exp`` names (Fig. 12's ``engine_experiment``: its live-engine
    jobs), loaded with ``exp``'s operational overrides (``paths.*``) and flags, with :func:`load`'s refusals; None
    when ``exp`` names none or none of its jobs has run yet (nothing of it to draw)."""
    name = exp.jobs[0].cfg.get(key) if exp.jobs else None
    if not name:
        return None
    overrides = [
        f"experiment={name}",
        *(o for o in exp.overrides if o.split("=", 1)[0].lstrip("+~").startswith("paths.")),
    ]
    try:
        jobs = sweep_jobs(overrides)
    except (SweepError, ValueError) as err:
        raise SystemExit(f"{key}={name}: cannot expand {' '.join(overrides)}: {err}") from None
    if not any(j.shard is not None or j.error for j in jobs):
        return None
    return collect(overrides, exp.allow_partial, exp.allow_mixed_versions, jobs=jobs)


SELECTION_ONLY = ("n_items", "seed")  # config keys that choose which items a job runs, not how an item is computed


def cell_key(job: JobView) -> str:
    """What makes two jobs' rows of one item the same measurement: the job's config identity without the keys
    that only choose its items (:data:`SELECTION_ONLY`); model, dtype, benchmark (subsets, split, options),
    canonical_context, eta_floor and max_new_tokens stay, so a sweep over any of those keeps every row."""
    ident = config_identity(job.cfg)
    return digest({k: v for k, v in ident.items() if k not in SELECTION_ONLY})


def once_per_cell(frames: list[tuple[JobView, pd.DataFrame]], column: str) -> pd.DataFrame:
    """The records of every job, each (cell, item_id, ``column`` label, knobs) from one job only.

    A sweep over n_items or seed (``n_items=2,3``, ``seed=0,1``) has jobs whose selections overlap: without
    this an item selected by two jobs would count twice in every cell (n = 5 for 3 distinct items). For each
    (:func:`cell_key`, item, arm or probe, knobs) the records of the **first job in the sweep's expansion order**
    (Hydra's order, as :func:`kamera.sweep.status.sweep_jobs` lists them) are kept, all of them (a probe's
    long-format records of one item stay together), and the later jobs' records of it are dropped. Same
    checkpoint and data copy (:func:`kamera.sweep.status.sweep_jobs` matches both), same code: the rows kept
    and dropped measure the same thing, up to timings and seed-dependent arms."""
    seen: set[tuple] = set()
    kept = []
    for job, frame in frames:
        if frame.empty:
            continue
        cell = cell_key(job)
        keys = list(
            zip(frame["item_id"].astype(str), frame[column].astype(str), frame["knobs"].astype(str), strict=True)
        )
        new = {k for k in keys if (cell, *k) not in seen}
        seen |= {(cell, *k) for k in new}
        kept.append(frame[[k in new for k in keys]])
    return _concat(kept)


def mixed_versions(frames: list[tuple[JobView, pd.DataFrame]], column: str) -> list[str]:
    """One line per (cell, arm or probe label) whose records carry more than one code version (their
    :data:`~kamera.job.store.STAMP`: the plugin's ``version`` and the row metrics' ``metrics_version``, 1 where a
    shard written before versions existed has none), naming the label, each version and the shards holding it."""
    found: dict[tuple[str, str], dict[tuple, set[str]]] = {}
    cells: dict[str, str] = {}
    for job, frame in frames:
        if frame.empty:
            continue
        cell = cell_key(job)
        cells.setdefault(cell, job.name)
        stamps = frame.reindex(columns=list(STAMP)).fillna(1).astype(int).itertuples(index=False, name=None)
        for label, stamp in zip(frame[column].astype(str), stamps, strict=True):
            found.setdefault((cell, label), {}).setdefault(stamp, set()).add(str(job.shard.path))
    lines = []
    for (cell, label), by_stamp in found.items():
        if len(by_stamp) > 1:
            lines.append(
                f"{label} ({cells[cell]}): "
                + "; ".join(
                    " ".join(f"{c} {v}" for c, v in zip(STAMP, stamp, strict=True)) + " in " + ", ".join(sorted(paths))
                    for stamp, paths in sorted(by_stamp.items())
                )
            )
    return lines


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def footer(jobs: list[JobView], partial: list[str]) -> str:
    """One line: the code, packages, devices and dtypes the rows came from (and PARTIAL if so); it does
    not change when only the rendering commit does, so re-rendering unchanged rows is byte-stable."""
    runs = [r for j in jobs if j.shard is not None for r in j.shard.meta().get("runs", [])]

    def values(key: str, fmt: Callable[[dict], str] | None = None) -> str:
        seen = dict.fromkeys((fmt or (lambda r: str(r.get(key))))(r) for r in runs)
        return "/".join(seen) or "?"

    metas = [j.shard.meta() for j in jobs if j.shard is not None]
    roots = "/".join(dict.fromkeys(_data_copy(j) for j in jobs if j.shard is not None)) or "?"
    checkpoints = "/".join(dict.fromkeys(str((m.get("identity") or {}).get("checkpoint")) for m in metas)) or "?"
    line = (
        f"rows: {len(jobs)} job(s), commit {values('commit', lambda r: _commit(r['commit'], r['dirty']))}, "
        f"kamera {values('kamera')}, torch {values('torch')}, transformers {values('transformers')}, "
        f"device {values('device_name')}, dtype {values('dtype')}, data {roots}, checkpoint {checkpoints}"
    )
    return (f"PARTIAL ({len(partial)} incomplete job(s)). " if partial else "") + line


def _data_copy(job: JobView) -> str:
    """The data root a job's rows were computed on ("generated" for a benchmark without files), and the copy its
    overrides named when that copy had no shard of its own (:attr:`JobView.stand_in`)."""
    root = str((job.shard.meta().get("selection") or {}).get("root") or "generated")
    return f"{root} (read for {job.stand_in}: byte-identical annotation files)" if job.stand_in else root


def _commit(commit: str, dirty: bool | None) -> str:
    return commit[:10] + ("+dirty" if dirty else "")


def publish(exp: Experiment, paths: list[Path]) -> None:
    """Print where the outputs went and, with tracking on, attach them to a wandb run of the experiment."""
    print("wrote " + ", ".join(str(p) for p in paths))
    tracker = Tracker.start(
        exp.tracking, "kamera", exp.name, f"render-{exp.name}", {"experiment": exp.name}, Path("outputs") / "wandb"
    )
    tracker.log_files(paths)
    tracker.finish()


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


def save_figure(fig: plt.Figure, stem: Path, footer: str = "", place: str | None = "axes") -> list[Path]:
    """PDF (no creation date: reruns are byte-identical) and PNG, with the footer in small type: below the first
    axes' x label (``place="axes"``), or centred under the whole grid of panels (``"figure"``); ``None`` when
    the figure already carries it (:func:`footer_below`, drawn inside the style context)."""
    if footer and place == "axes":
        ax = fig.axes[0]
        ax.annotate(
            "\n".join(textwrap.wrap(footer, 110)),
            xy=(0.5, 0),
            xycoords=ax.xaxis.label,
            xytext=(0, -4),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=3.5,
        )
    elif footer and place == "figure":
        fig.text(0.5, 0.0, "\n".join(textwrap.wrap(footer, 160)), ha="center", va="top", fontsize=4)
    stem.parent.mkdir(parents=True, exist_ok=True)
    pdf, png = stem.with_suffix(".pdf"), stem.with_suffix(".png")
    opts = {"bbox_inches": "tight", "pad_inches": 0.02}
    # Each file is drawn into a dot-named temp file beside it and os.replace'd only once both are complete
    # (kamera.job.store.staged): a kill mid-render leaves the previous good PDF and PNG as they were, and no temp file.
    try:
        with staged(pdf) as pdf_tmp, staged(png) as png_tmp:
            fig.savefig(
                pdf_tmp,
                format="pdf",
                metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
                **opts,
            )
            fig.savefig(png_tmp, format="png", metadata={"Software": None}, dpi=300, **opts)
    finally:
        plt.close(fig)
    return [pdf, png]


def footer_below(fig: plt.Figure, footer: str) -> None:
    """The provenance footer in small type below everything drawn, for figures with several rows of axes and
    legends below them (call it last inside the style context, then save with ``place=None``)."""
    if footer:
        bottom = fig.get_tightbbox(fig.canvas.get_renderer()).y0 / fig.get_figheight()  # figure fraction
        fig.text(0.0, bottom - 0.005, "\n".join(textwrap.wrap(footer, 160)), ha="left", va="top", fontsize=3.5)


# ----- what every renderer shares ----------------------------------------------------------------------
def cli(
    doc: str, default: str, draw: Callable[[Experiment], tuple[str, list[Path]]], argv: list[str] | None = None
) -> None:
    """A renderer's ``main``: load the experiment's rows, ``draw`` them, print the markdown, publish. SIGTERM ends it
    through its cleanup (no hidden temp file left); a file it cannot write (a full disk) is one line."""
    with terminate_as_exit():
        exp = load(doc.split("\n\n")[0], default, argv)
        try:
            md, paths = draw(exp)
        except StoreWriteError as err:
            raise SystemExit(f"error: {err}") from None
        print(md)
        publish(exp, paths)


def with_job_columns(exp: Experiment, rows: pd.DataFrame, columns: dict[str, Callable]) -> pd.DataFrame:
    """``rows`` with columns read off each row's job config (``columns[name](cfg)``), joined on config_key.

    Rows name their job's identity but not every config key (e.g. ``canonical_context``): a renderer
    that compares jobs of one sweep by such a key adds it here, from exactly the jobs ``load`` read."""
    configs = {j.key: j.cfg for j in exp.jobs}
    out = rows.copy()
    for name, read in columns.items():
        out[name] = [read(configs[k]) for k in out["config_key"]]
    return out


def require_rows(rows: pd.DataFrame, group: str) -> None:
    if rows.empty:
        raise SystemExit(f"{group} has no rows")


def table_outputs(
    frame: pd.DataFrame,
    stem: Path,
    title: str,
    caption: str,
    label: str,
    footer: str = "",
    notes: list[str] = (),
    math: bool = True,
    subtitle: str = "",
    index_label: str | None = None,
) -> tuple[str, list[Path]]:
    """A table's markdown (:func:`markdown_table`; ``index_label`` names its first column where the frame's
    index has no name) and booktabs LaTeX (:func:`latex_table`), written to <stem>.md and <stem>.tex."""
    md = markdown_table(frame.rename_axis(index_label) if index_label else frame, title, footer, notes, subtitle)
    tex = latex_table(frame, caption, label, footer, math)
    return md, [write_text(stem.with_suffix(".md"), md), write_text(stem.with_suffix(".tex"), tex)]


def figure_outputs(
    fig: plt.Figure, md: str, stem: Path, footer: str = "", place: str | None = "axes"
) -> tuple[str, list[Path]]:
    """A figure's <stem>.pdf (byte-stable) and .png with the footer (:func:`save_figure`'s ``place``), and its
    data table <stem>.md."""
    return md, [*save_figure(fig, stem, footer, place), write_text(stem.with_suffix(".md"), md)]


def suffixed(stem: Path, suffix: str) -> Path:
    """A companion output beside ``stem``: ``figures/table8`` → ``figures/table8_sweep``."""
    return stem.with_name(stem.name + suffix)


def main(argv: list[str] | None = None) -> None:
    """``python -m experiments.common experiment=X …``: run the renderer the experiment names (``renderer:``);
    ``--docs [--check]``: docs/reproduction.md's paper values from the paper: blocks."""
    argv = sys.argv[1:] if argv is None else argv
    if "--docs" in argv:
        raise SystemExit(docs(check="--check" in argv))
    args = parse(__doc__.split("\n\n")[0], "table3_tiny", sys.argv[1:] if argv is None else argv)
    experiment = next(o for o in args.overrides if o.split("=", 1)[0].lstrip("+~") == "experiment")
    try:
        renderer = compose_config([experiment]).renderer
    except SweepError as err:
        raise SystemExit(str(err)) from None
    if not renderer:
        raise SystemExit(f"{experiment} names no renderer (add `renderer: <experiments module>` to its config)")
    importlib.import_module(f"experiments.{renderer}").main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
