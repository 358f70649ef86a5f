"""What every table and figure shares: exactly the experiment's rows, CI cells, the paper's numbers,
a provenance footer and byte-stable output.

A renderer reads the jobs of its experiment as Hydra expands them with the same overrides the sweep
ran with (:func:`kamera.sweep.status.sweep_jobs`), from the results root the runner resolves
(``paths.results``: KAMERA_RESULTS, else ``results/raw`` under the working directory), and counts
each (item, arm) of each job once. An incomplete job fails the render, naming it and its k / n,
unless ``--allow-partial`` (the output then says "partial"). Every output carries a footer: the
commit (and whether it was dirty), package versions, device and dtype its rows came from.

    python -m experiments.common experiment=table3_tiny [overrides…] [--allow-partial]   # make render EXP=…
    python experiments/table3.py experiment=table3_tiny [overrides…] [--allow-partial] [--out STEM]

Tables and figures are pure functions of the rows; nothing here loads a model or runs a forward.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kamera.job.store import ShardCorruptError, atomic_write_text
from kamera.metrics import bootstrap_ci
from kamera.run.track import Tracker
from kamera.sweep import SweepError, compose_config
from kamera.sweep.status import JobView, sweep_jobs

STYLE = Path(__file__).resolve().parent / "paper.mplstyle"
FULL_WIDTH = 6.75  # inches: a multi-panel figure spans two of the style's 3.25 in columns and the gap between
ERRORBAR = {"elinewidth": 0.6, "capsize": 1.0, "capthick": 0.6}  # error bars of bar charts (95% CIs)

# The paper's numbers (EXPERIMENTS.md), keyed by our model / subset / arm names.
PAPER_TABLE3 = {
    ("qwen2_5_vl_7b", "reasoning-image"): {"reprefill": 0.59, "blind": 0.41, "patch_r16": 0.64, "patch_r64": 0.59},
    ("qwen2_5_vl_7b", "retrieval-image"): {"reprefill": 0.74, "blind": 0.38, "patch_r16": 0.72, "patch_r64": 0.70},
    ("kimi_vl_a3b", "reasoning-image"): {"reprefill": 0.80, "blind": 0.57, "patch_r16": 0.79, "patch_r64": 0.82},
    ("kimi_vl_a3b", "retrieval-image"): {"reprefill": 0.55, "blind": 0.35, "patch_r16": 0.52, "patch_r64": 0.55},
}
PAPER_FIG5_MLA_BLIND_FLOOR = 0.44  # Kimi-VL blind-reuse KL in Fig. 5


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

    def stem(self, kind: str) -> Path:
        """Where an output goes: ``--out`` if given, else <paths.tables | paths.figures>/<experiment>."""
        return self.out or (self.tables if kind == "table" else self.figures) / self.name


def parse(description: str, default_experiment: str, argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("overrides", nargs="*", help=f"Hydra overrides of the sweep (default experiment={default_experiment})")
    ap.add_argument("--allow-partial", action="store_true", help="render incomplete jobs too; the output says partial")
    ap.add_argument("--out", default=None, help="output stem (default: <paths.tables or paths.figures>/<experiment>)")
    modes = ["disabled", "offline", "online"]
    ap.add_argument("--tracking", default=os.environ.get("KAMERA_TRACKING") or "disabled", choices=modes,
                    help="also log the outputs to wandb (default: $KAMERA_TRACKING, else disabled)")
    args = ap.parse_intermixed_args(argv)
    if args.tracking not in modes:  # argparse checks choices on given values only, not on the default
        ap.error(f"KAMERA_TRACKING must be one of {', '.join(modes)}, got {args.tracking!r}")
    if not any(o.split("=", 1)[0].lstrip("+~") == "experiment" for o in args.overrides):
        args.overrides.insert(0, f"experiment={default_experiment}")
    return args


def load(description: str, default_experiment: str, argv: list[str] | None = None) -> Experiment:
    """The experiment's jobs and rows; SystemExit naming every incomplete job unless --allow-partial."""
    args = parse(description, default_experiment, argv)
    try:
        jobs = sweep_jobs(args.overrides)
    except (SweepError, ValueError) as err:
        raise SystemExit(f"cannot expand {' '.join(args.overrides)}: {err}") from None
    if not jobs:
        raise SystemExit(f"{' '.join(args.overrides)} expands to no job")
    cfg = jobs[0].cfg
    unique = list({j.key: j for j in jobs}.values())  # a sweep listing one job twice counts it once
    incomplete = [f"{' '.join(j.overrides)}: {'corrupt: ' + j.error if j.error else j.state.summary()}"
                  for j in unique if j.error or not j.state.complete]
    if incomplete and not args.allow_partial:
        raise SystemExit(
            f"{cfg.group}: {len(incomplete)} of {len(unique)} job(s) incomplete (run the sweep, see python -m "
            "kamera.sweep.status, or render with --allow-partial):\n- " + "\n- ".join(incomplete)
        )
    try:
        readable = [j for j in unique if not j.error]
        rows = _concat([j.rows() for j in readable])
        probes = _concat([j.probe_records() for j in readable])
    except ShardCorruptError as err:
        raise SystemExit(str(err)) from None
    if rows.empty and probes.empty:
        raise SystemExit(f"{cfg.group}: no stored rows for its {len(unique)} job(s) under {cfg.paths.results}")
    return Experiment(cfg.group, unique, rows, probes, incomplete, footer(readable, incomplete),
                      Path(cfg.paths.tables), Path(cfg.paths.figures), Path(args.out) if args.out else None,
                      args.tracking)


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

    line = (
        f"rows: {len(jobs)} job(s), commit {values('commit', lambda r: _commit(r['commit'], r['dirty']))}, "
        f"kamera {values('kamera')}, torch {values('torch')}, transformers {values('transformers')}, "
        f"device {values('device_name')}, dtype {values('dtype')}"
    )
    return (f"PARTIAL ({len(partial)} incomplete job(s)). " if partial else "") + line


def _commit(commit: str, dirty: bool | None) -> str:
    return commit[:10] + ("+dirty" if dirty else "")


def publish(exp: Experiment, paths: list[Path]) -> None:
    """Print where the outputs went and, with tracking on, attach them to a wandb run of the experiment."""
    print("wrote " + ", ".join(str(p) for p in paths))
    tracker = Tracker.start(exp.tracking, "kamera", exp.name, f"render-{exp.name}", {"experiment": exp.name},
                            Path("outputs") / "wandb")
    tracker.log_files(paths)
    tracker.finish()


def ci_cell(values, seed: int = 0, clusters: list | None = None, fmt: Callable[[float], str] = "{:.2f}".format,
            stat: Callable[[np.ndarray], float] = np.mean) -> str:
    """'0.59 [0.46, 0.71]': the statistic (mean by default) and its seeded 95% bootstrap interval, over
    items or over ``clusters`` (one label per value, see :func:`cluster_labels`); '–' when no value."""
    mean, lo, hi = bootstrap_ci(list(values), stat, seed=seed, clusters=clusters)
    return "–" if pd.isna(mean) else f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


def save_figure(fig: plt.Figure, stem: Path, footer: str = "") -> list[Path]:
    """PDF (no creation date: reruns are byte-identical) and PNG, with the footer in small type below the
    first axes' x label."""
    if footer:
        ax = fig.axes[0]
        ax.annotate("\n".join(textwrap.wrap(footer, 110)), xy=(0.5, 0), xycoords=ax.xaxis.label, xytext=(0, -4),
                    textcoords="offset points", ha="center", va="top", fontsize=3.5)
    stem.parent.mkdir(parents=True, exist_ok=True)
    pdf, png = stem.with_suffix(".pdf"), stem.with_suffix(".png")
    opts = {"bbox_inches": "tight", "pad_inches": 0.02}
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}, **opts)
    fig.savefig(png, metadata={"Software": None}, dpi=300, **opts)
    plt.close(fig)
    return [pdf, png]


# ----- what the renderers of Tables 4–8 and Figs. 6, 7, 9, 10 share -------------------------------
def cli(doc: str, default: str, draw: Callable[[Experiment], tuple[str, list[Path]]],
        argv: list[str] | None = None) -> None:
    """A renderer's ``main``: load the experiment's rows, ``draw`` them, print the markdown, publish."""
    exp = load(doc.split("\n\n")[0], default, argv)
    md, paths = draw(exp)
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


def interval(rows: pd.DataFrame, column: str, stat: Callable[[np.ndarray], float] = np.mean,
             seed: int = 0) -> tuple[float, float, float]:
    """(statistic, low, high) of ``rows[column]``: the cluster bootstrap over the rows' items (NaNs dropped)."""
    return bootstrap_ci(rows[column].astype(float).tolist(), stat, seed=seed, clusters=cluster_labels(rows))


def row_cell(rows: pd.DataFrame, column: str, fmt: Callable[[float], str] = "{:.2f}".format,
             stat: Callable[[np.ndarray], float] = np.mean) -> str:
    """:func:`ci_cell` of ``rows[column]`` with the rows' clusters."""
    return ci_cell(rows[column].astype(float).tolist(), clusters=cluster_labels(rows), fmt=fmt, stat=stat)


def kl_fmt(value: float) -> str:
    """A KL in two significant digits: '0.025', '1.2e-05'."""
    return f"{value:.2g}"


def pct_fmt(value: float) -> str:
    """A fraction as a percentage: '68%'."""
    return f"{100 * value:.0f}%"


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


def markdown_table(frame: pd.DataFrame, title: str, footer: str = "", notes: list[str] = ()) -> str:
    """A titled markdown table of ``frame`` (index = first column; tuple column names joined by ' · '),
    notes below it and the footer last."""
    names = [" · ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in frame.columns]
    lines = [f"**{title}**", "", "| " + " | ".join([str(frame.index.name or ""), *names]) + " |",
             "|---" * (len(names) + 1) + "|"]
    lines += ["| " + " | ".join([str(i), *map(str, row)]) + " |" for i, row in frame.iterrows()]
    lines += [f"\n{n}" for n in notes]
    if footer:
        lines.append(f"\n_{footer}_")
    return "\n".join(lines) + "\n"


LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
# the symbols tables print, as math a pdflatex document needs no package for (– and — pass as UTF-8 text)
LATEX_SYMBOLS = {"η": r"$\eta$", "Δ": r"$\Delta$", "≈": r"$\approx$", "∼": r"$\sim$", "−": r"$-$", "×": r"$\times$",
                 "≤": r"$\leq$", "≥": r"$\geq$", "≡": r"$\equiv$", "·": r"$\cdot$", "→": r"$\to$", "ℓ": r"$\ell$",
                 "§": r"\S{}"}


def latex_text(text: str) -> str:
    """Plain text as LaTeX: special characters escaped (symbols are mapped by :func:`latex_table`)."""
    return "".join(LATEX_ESCAPES.get(c, c) for c in text)


def latex_table(frame: pd.DataFrame, caption: str, label: str, footer: str = "") -> str:
    """``frame`` as a booktabs LaTeX table: cells and the plain-text ``caption`` escaped, symbols as math (so
    pdflatex compiles it), the footer as a leading comment."""
    styler = frame.rename_axis(None).style.format(escape="latex").format_index(escape="latex", axis=0).format_index(escape="latex", axis=1)
    tex = styler.to_latex(hrules=True, caption=latex_text(caption), label=label,
                          column_format="l" + "c" * len(frame.columns), multicol_align="c", position_float="centering")
    tex = "".join(LATEX_SYMBOLS.get(c, c) for c in tex)
    return f"% {footer}\n{tex}" if footer else tex


def require_rows(rows: pd.DataFrame, group: str) -> None:
    if rows.empty:
        raise SystemExit(f"{group} has no rows")


def arm_table(columns: dict[tuple[str, str], dict[str, str]], counts: dict[tuple[str, str], str],
              arms: list[str]) -> pd.DataFrame:
    """Arms × (model, column) cells ('–' where an arm has none), with a last row ``n`` of counts."""
    frame = pd.DataFrame(columns).reindex(arms).fillna("–")
    frame.loc["n"] = pd.Series(counts)
    frame.index.name = "arm"
    frame.columns = pd.MultiIndex.from_tuples(list(columns), names=["model", ""])
    return frame


def table_outputs(frame: pd.DataFrame, stem: Path, title: str, caption: str, label: str, footer: str = "",
                  notes: list[str] = ()) -> tuple[str, list[Path]]:
    """A table's markdown (title, notes, footer) and booktabs LaTeX, written to <stem>.md and <stem>.tex."""
    md = markdown_table(frame, title, footer, notes)
    tex = latex_table(frame, caption, label, footer)
    return md, [write_text(stem.with_suffix(".md"), md), write_text(stem.with_suffix(".tex"), tex)]


def figure_outputs(fig: plt.Figure, md: str, stem: Path, footer: str = "") -> tuple[str, list[Path]]:
    """A figure's <stem>.pdf (byte-stable) and .png, and its data table <stem>.md."""
    return md, [*save_figure(fig, stem, footer), write_text(stem.with_suffix(".md"), md)]


def suffixed(stem: Path, suffix: str) -> Path:
    """A companion output beside ``stem``: ``figures/table8`` → ``figures/table8_sweep``."""
    return stem.with_name(stem.name + suffix)


def main(argv: list[str] | None = None) -> None:
    """``python -m experiments.common experiment=X …``: run the renderer the experiment names (``renderer:``)."""
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
