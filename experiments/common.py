"""What every table and figure shares: exactly the experiment's rows, CI cells, the paper's numbers,
a provenance footer and byte-stable output.

A renderer is ``experiments/<name>.py``: one ``render(…)`` (a pure function of rows, probe records and the
paper's values, returning its markdown and the paths it wrote) and ``main = cli(__doc__, "<name>", draw)``.
It writes through the helpers here only: :func:`markdown_table` / :func:`markdown_rows` / :func:`document`
(markdown), :func:`latex_table` (LaTeX), :func:`table_outputs` and :func:`figure_outputs` (the files),
:func:`partial_tag` (the title's ", partial"). The paper's values it prints come from the experiment's
``paper:`` block (``conf/experiment/<name>.yaml``; the composed config's ``paper`` key, see
:func:`paper_values`); ``python -m experiments.common --docs`` writes them into docs/reproduction.md.

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
import copy
import functools
import importlib
import json
import math
import os
import re
import string
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from kamera.job import config_identity
from kamera.job.store import STAMP, ShardCorruptError, StoreWriteError, atomic_write_text, staged
from kamera.metrics import bootstrap_ci
from kamera.provenance import digest
from kamera.run.signals import terminate_as_exit
from kamera.run.track import Tracker
from kamera.sweep import SweepError, compose_config
from kamera.sweep.status import JobView, sweep_jobs

STYLE = Path(__file__).resolve().parent / "paper.mplstyle"
FULL_WIDTH = 6.75  # inches: a multi-panel figure spans two of the style's 3.25 in columns and the gap between
ERRORBAR = {"elinewidth": 0.6, "capsize": 1.0, "capthick": 0.6}  # error bars of bar charts (95% CIs)

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "conf" / "experiment"  # <name>.yaml (paper scale, with its paper: block) and <name>_tiny.yaml
DOCS = ROOT / "docs" / "reproduction.md"
README = ROOT / "README.md"  # its artefact map (:func:`readme_table`)


def artifacts() -> list[str]:
    """Every paper table and figure: each ``<name>`` of conf/experiment with both ``<name>.yaml`` and
    ``<name>_tiny.yaml`` (the Makefile's ARTIFACTS and the tests' lists are read off the same files)."""
    return sorted(p.stem for p in EXPERIMENTS.glob("*.yaml")
                  if not p.stem.endswith("_tiny") and (EXPERIMENTS / f"{p.stem}_tiny.yaml").exists())


class _PaperProse(string.Formatter):
    """Fills a ``paper:`` block's prose from its own values, so each number is written once (in the structured
    values the renderer prints beside ours) and the sentences only point at it:

        {accuracy.kimi_vl_a3b.two_page.reprefill}   a value by its dotted path (a mapping's int keys by their digits)
        {models.*.stale:+.2f}                        every key's value at that place, joined by " / "
        {...:.2f} and the other format specs         as format() writes them (a string value as written)
        {...!z:.2f}  {...!m:+.2f}                    without the leading zero (.41), with a typographic minus (−0.68)
        {models.*.e90!M:.2f}  {models.*.e90!R:.2f}   the largest of the values, their range lo–hi (0.18–0.30)
    """

    def get_field(self, field_name: str, args, kwargs) -> tuple[object, str]:
        return self._lookup(kwargs, field_name.split(".")), field_name

    def _lookup(self, node: object, path: list[str]) -> object:
        if not path:
            return node
        head, rest = path[0], path[1:]
        if head == "*" and isinstance(node, dict):
            return _Each([self._lookup(v, rest) for v in node.values()])
        if isinstance(node, dict):
            key = head if head in node else int(head) if head.lstrip("-").isdigit() and int(head) in node else None
            if key is not None:
                return self._lookup(node[key], rest)
        if isinstance(node, list) and head.isdigit() and int(head) < len(node):
            return self._lookup(node[int(head)], rest)
        raise KeyError(f"paper: block has no value at {head!r} (in a template's field)")

    def convert_field(self, value: object, conversion: str | None) -> object:
        if conversion in ("M", "R") and isinstance(value, _Each):  # the largest, or the range lo–hi, of the values
            return max(value) if conversion == "M" else _Range((min(value), max(value)))
        return (conversion, value) if conversion in ("z", "m") else super().convert_field(value, conversion)

    def format_field(self, value: object, format_spec: str) -> str:
        conversion = None
        if isinstance(value, tuple) and not isinstance(value, _Range):
            conversion, value = value
        if isinstance(value, _Range):
            return "–".join(format(v, format_spec) for v in value)
        if isinstance(value, _Each):
            return " / ".join(self.format_field((conversion, v) if conversion else v, format_spec) for v in value)
        text = value if isinstance(value, str) else format(value, format_spec)  # a string is printed as written
        if conversion == "z":
            text = re.sub(r"^([+-]?)0\.", r"\1.", text)
        elif conversion == "m":
            text = text.replace("-", "−")
        return text


class _Each(list):
    """The values a ``*`` in a template's path gathers."""


class _Range(tuple):
    """(lo, hi) of the values a ``*`` gathers (``!R``), written lo–hi."""


PROSE = ("summary", "note")  # the sentences of a paper: block, templates over its values (:class:`_PaperProse`)


def paper_prose(block: dict) -> dict:
    """``block`` with its :data:`PROSE` filled in from its own values; ValueError naming the experiment's field that
    points at no value."""
    out = dict(block)
    for key in PROSE:
        if isinstance(block.get(key), str):
            try:
                out[key] = _PaperProse().vformat(block[key], (), out)  # a later sentence may quote an earlier one
            except (KeyError, ValueError, IndexError) as err:
                raise ValueError(f"paper.{key} of {block.get('title', 'an experiment')!r}: {err}") from None
    return out


@functools.cache
def _paper_block(experiment: str) -> dict:
    cfg = OmegaConf.load(EXPERIMENTS / f"{experiment}.yaml")
    return paper_prose(OmegaConf.to_container(cfg.get("paper") or OmegaConf.create({}), resolve=True))


def paper_values(experiment: str) -> dict:
    """The ``paper:`` block of conf/experiment/<experiment>.yaml as plain data: the paper's values a renderer
    prints beside ours (a renderer called without ``paper=`` reads its own experiment's)."""
    return copy.deepcopy(_paper_block(experiment))


def arm_labels(entries: object) -> list[str]:
    """The base label of each ``arms`` entry (``patch_r16``, ``{patch_r16: {rank: 24}}``, ``{name: cacheblend, …}``)."""
    entries = OmegaConf.to_container(entries, resolve=True) if OmegaConf.is_config(entries) else entries or []
    return [e if isinstance(e, str) else e.get("name") or next(iter(e)) for e in entries]


def arm_order(arms: list[str] | None, experiment: str) -> list[str]:
    """The order a renderer lists arms in: ``arms`` (the experiment's ``arms:`` as its jobs ran them,
    :attr:`Experiment.arms`), else conf/experiment/<experiment>.yaml's: the one list of an experiment's arms."""
    if arms is not None:
        return list(arms)
    return arm_labels(OmegaConf.load(EXPERIMENTS / f"{experiment}.yaml").get("arms"))


def paper_or(paper: dict | None, experiment: str) -> dict:
    """``paper`` (the composed config's ``paper`` block, as :class:`Experiment` carries it), else the file's."""
    return paper_values(experiment) if paper is None else paper


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


def ci_cell(
    values,
    seed: int = 0,
    clusters: list | None = None,
    fmt: Callable[[float], str] = "{:.2f}".format,
    stat: Callable[[np.ndarray], float] = np.mean,
) -> str:
    """'0.59 [0.46, 0.71]': the statistic (mean by default) and its seeded 95% bootstrap interval, over
    items or over ``clusters`` (one label per value, see :func:`cluster_labels`); '–' when no value."""
    mean, lo, hi = bootstrap_ci(list(values), stat, seed=seed, clusters=clusters)
    return "–" if pd.isna(mean) else f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


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


def partial_tag(footer: str) -> str:
    """', partial' when the footer says some jobs were incomplete (the title then says so too)."""
    return ", partial" if footer.startswith("PARTIAL") else ""


def cluster_labels(rows: pd.DataFrame) -> list[str]:
    """One bootstrap cluster per row: its ``cluster_key`` (several questions on one document or video are
    resampled together), else its own item (every item its own cluster)."""
    keys = rows["cluster_key"] if "cluster_key" in rows else [None] * len(rows)
    return [k if isinstance(k, str) and k else f"item:{i}" for k, i in zip(keys, rows["item_id"], strict=True)]


def interval(
    rows: pd.DataFrame, column: str, stat: Callable[[np.ndarray], float] = np.mean, seed: int = 0
) -> tuple[float, float, float]:
    """(statistic, low, high) of ``rows[column]``: the cluster bootstrap over the rows' items (NaNs dropped)."""
    return bootstrap_ci(rows[column].astype(float).tolist(), stat, seed=seed, clusters=cluster_labels(rows))


def row_cell(
    rows: pd.DataFrame,
    column: str,
    fmt: Callable[[float], str] = "{:.2f}".format,
    stat: Callable[[np.ndarray], float] = np.mean,
) -> str:
    """:func:`ci_cell` of ``rows[column]`` with the rows' clusters."""
    return ci_cell(rows[column].astype(float).tolist(), clusters=cluster_labels(rows), fmt=fmt, stat=stat)


def stuck_rate(rows: pd.DataFrame) -> float:
    """The share of ``rows``' generated answers that stopped making progress (docs/metrics.md "Stuck rate"); NaN where
    none was generated (logit-scored rows, and rows of code before the measure: a null ``stuck``)."""
    stuck = rows["stuck"].astype(float).dropna() if "stuck" in rows else pd.Series(dtype=float)
    return float(stuck.mean()) if len(stuck) else math.nan


def with_stuck(cell: str, rate: float) -> str:
    """An accuracy cell with its generations' stuck rate beside it ("0.31 [0.12, 0.56] · stuck 0.25"), where any."""
    return cell if math.isnan(rate) else f"{cell} · stuck {rate:.2f}"


def accuracy_cell(rows: pd.DataFrame) -> str:
    """An accuracy cell (:func:`row_cell` of ``correct``) with its answers' stuck rate (:func:`with_stuck`)."""
    return with_stuck(row_cell(rows, "correct"), stuck_rate(rows))


def kl_fmt(value: float) -> str:
    """A KL in two significant digits: '0.025', '1.2e-05'."""
    return f"{value:.2g}"


def with_paper(cell: str, paper: float | str | None, fmt: Callable[[float], str] = "{:.2f}".format) -> str:
    """``cell`` with the paper's value beside it, '0.41 [0.3, 0.5] (paper 0.41)', where the paper has one."""
    if paper is None or (isinstance(paper, float) and np.isnan(paper)):
        return cell
    return f"{cell} (paper {paper if isinstance(paper, str) else fmt(paper)})"


def params(rows: pd.DataFrame) -> pd.Series:
    """Each row's arm parameters (its knobs and what the arm reported) as a dict."""
    return rows["params"].map(json.loads)


def natural_order(labels, first: list[str] = ()) -> list[str]:
    """The labels of ``first`` (and their knob variants, ``shallow_reprefill[reuse_layers=1]``) in its order,
    then the rest in natural order (patch_r8 < patch_r16 < patch_full)."""

    def key(label: str) -> list:
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(label).replace("_full", "_r1000000"))]

    present = sorted(dict.fromkeys(labels), key=key)
    head = [a for f in first for a in present if str(a).split("[", 1)[0] == f]
    return head + [a for a in present if a not in head]


def markdown_rows(header: list[str], rows: list[list]) -> list[str]:
    """Markdown table lines: the header, the separator and one line per row (cells as ``str``)."""
    return [
        "| " + " | ".join(map(str, header)) + " |",
        "|---" * len(header) + "|",
        *["| " + " | ".join(map(str, r)) + " |" for r in rows],
    ]


def document(lines: list[str], footer: str = "") -> str:
    """Markdown lines, the footer last (in italics, after a blank line)."""
    return "\n".join([*lines, *([f"\n_{footer}_"] if footer else [])]) + "\n"


def markdown_table(frame: pd.DataFrame, title: str, footer: str = "", notes: list[str] = (), subtitle: str = "") -> str:
    """A markdown table of ``frame`` (its index levels the first columns; tuple column names joined by ' · ')
    under the bold ``title`` (and `` — subtitle`` in plain type), each note below it after a blank line and
    the footer last."""
    names = [" · ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in frame.columns]
    index = [str(n or "") for n in frame.index.names]
    body = [[*(i if isinstance(i, tuple) else (i,)), *row] for i, row in frame.iterrows()]
    head = f"**{title}**" + (f" — {subtitle}" if subtitle else "")
    return document([head, "", *markdown_rows([*index, *names], body), *[f"\n{n}" for n in notes]], footer)


LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
# the symbols tables print, as math a pdflatex document needs no package for (– and — pass as UTF-8 text)
LATEX_SYMBOLS = {
    "η": r"$\eta$",
    "Δ": r"$\Delta$",
    "≈": r"$\approx$",
    "∼": r"$\sim$",
    "−": r"$-$",
    "×": r"$\times$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "≡": r"$\equiv$",
    "·": r"$\cdot$",
    "→": r"$\to$",
    "ℓ": r"$\ell$",
    "§": r"\S{}",
}


def latex_text(text: str) -> str:
    """Plain text as LaTeX: special characters escaped (symbols are mapped by :func:`latex_table`)."""
    return "".join(LATEX_ESCAPES.get(c, c) for c in text)


def latex_table(frame: pd.DataFrame, caption: str, label: str, footer: str = "", math: bool = True) -> str:
    """``frame`` as a booktabs LaTeX table, cells escaped, the footer as a leading comment. ``math``: the
    plain-text ``caption`` escaped too and symbols set as math, so pdflatex compiles it without a unicode
    package (the row index's name dropped); ``math=False``: the caption is LaTeX already, the index names are
    kept and symbols stay UTF-8 (Tables 1–3, App. D / E)."""
    styler = (frame.rename_axis(None) if math else frame).style.format(escape="latex")
    styler = styler.format_index(escape="latex", axis=0).format_index(escape="latex", axis=1)
    tex = styler.to_latex(
        hrules=True,
        caption=latex_text(caption) if math else caption,
        label=label,
        column_format="l" + "c" * len(frame.columns),
        multicol_align="c",
        position_float="centering",
    )
    if math:
        tex = "".join(LATEX_SYMBOLS.get(c, c) for c in tex)
    return f"% {footer}\n{tex}" if footer else tex


def require_rows(rows: pd.DataFrame, group: str) -> None:
    if rows.empty:
        raise SystemExit(f"{group} has no rows")


def arm_table(
    columns: dict[tuple[str, str], dict[str, str]], counts: dict[tuple[str, str], str], arms: list[str]
) -> pd.DataFrame:
    """Arms × (model, column) cells ('–' where an arm has none), with a last row ``n`` of counts."""
    frame = pd.DataFrame(columns).reindex(arms).fillna("–")
    frame.loc["n"] = pd.Series(counts)
    frame.index.name = "arm"
    frame.columns = pd.MultiIndex.from_tuples(list(columns), names=["model", ""])
    return frame


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


DOCS_ROW = re.compile(r"^\| (?P<title>[^|]*) \| `(?P<name>[a-z0-9_]+)` \| [^|]* \| [^|]* \| (?P<status>[^|]*) \|$")


def docs_table(text: str) -> str:
    """docs/reproduction.md with its artifact table regenerated from the paper: blocks: one row per
    :func:`artifacts` entry (its ``paper.title``, target, configs and ``paper.summary``), in the doc's order
    (new artifacts last, status "not run yet"); each row's status and the rest of the prose kept as written."""
    lines = text.split("\n")
    rows = [i for i, line in enumerate(lines) if DOCS_ROW.match(line)]
    if not rows:
        raise SystemExit(f"{DOCS}: no artifact table (rows | title | `name` | configs | paper | status |)")
    status = {m["name"]: m["status"] for m in (DOCS_ROW.match(lines[i]) for i in rows)}
    names = [n for n in status if n in artifacts()] + [n for n in artifacts() if n not in status]
    table = []
    for name in names:
        paper = paper_values(name)
        missing = [k for k in ("title", "summary") if not paper.get(k)]
        if missing:
            raise SystemExit(f"conf/experiment/{name}.yaml: its paper: block lacks {', '.join(missing)}")
        table.append(
            f"| {paper['title']} | `{name}` | `{name}`, `{name}_tiny` | {paper['summary']} | "
            f"{status.get(name, 'not run yet')} |"
        )
    return "\n".join([*lines[: rows[0]], *table, *lines[rows[-1] + 1 :]])


README_ROW = re.compile(r"^\| (?P<title>[^|]*) \| `make (?P<name>[a-z0-9_]+)` \| [^|]* \| (?P<tiny>[^|]*) \| [^|]* \|$")


def outputs_of(name: str) -> str:
    """The files ``make <name>`` writes, read off its renderer: a table's .md and .tex, a figure's .pdf, .png, .md."""
    renderer = OmegaConf.load(EXPERIMENTS / f"{name}.yaml").renderer
    source = (ROOT / "experiments" / f"{renderer}.py").read_text()
    kinds = [f"`results/tables/{name}[_tiny].{{md,tex}}`"] if "table_outputs(" in source else []
    return " and ".join(kinds + ([f"`figures/{name}[_tiny].{{pdf,png,md}}`"] if "figure_outputs(" in source else []))


def readme_table(text: str) -> str:
    """README.md with its artefact map regenerated: one row per :func:`artifacts` entry (its ``paper.title``, target,
    outputs and the H100-hours its ``cost:`` block states), in the README's order (new ones last, tiny time "–");
    each row's tiny time on 2 CPU cores is kept as written (a measured time, not derivable)."""
    lines = text.split("\n")
    rows = [i for i, line in enumerate(lines) if README_ROW.match(line)]
    if not rows:
        raise SystemExit(f"{README}: no artefact table (rows | title | `make name` | outputs | tiny | H100-hours |)")
    tiny = {m["name"]: m["tiny"] for m in (README_ROW.match(lines[i]) for i in rows)}
    names = [n for n in tiny if n in artifacts()] + [n for n in artifacts() if n not in tiny]
    table = []
    for name in names:
        hours = (OmegaConf.load(EXPERIMENTS / f"{name}.yaml").get("cost") or {}).get("h100_hours")
        table.append(
            f"| {paper_values(name)['title']} | `make {name}` | {outputs_of(name)} | {tiny.get(name, '–')} | "
            f"{'–' if hours is None else f'{hours:g}'} |"
        )
    return "\n".join([*lines[: rows[0]], *table, *lines[rows[-1] + 1 :]])


def docs(check: bool = False) -> int:
    """``--docs``: rewrite docs/reproduction.md's artifact table from the paper: blocks and the README's artefact map
    from the configs; ``--check``: exit 1 if either is stale."""
    stale = 0
    for path, make in ((DOCS, docs_table), (README, readme_table)):
        text = path.read_text()
        new = make(text)
        stale |= new != text
        if check:
            print(f"{path}: {'current' if new == text else 'stale: run python -m experiments.common --docs'}")
        elif new != text:
            atomic_write_text(path, new)
            print(f"{path}: rewritten")
        else:
            print(f"{path}: current")
    return int(check and stale)


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
