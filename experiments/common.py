"""What every table and figure shares: reading rows, CI cells, the paper's numbers, byte-stable output.

Tables and figures are pure functions of the rows in ``results/raw/<group>/`` (see ``kamera.store``);
nothing here loads a model or runs a forward.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from kamera.metrics import bootstrap_ci
from kamera.store import atomic_write_text, load_rows
from kamera.track import Tracker

ROOT = Path(__file__).resolve().parent.parent
STYLE = ROOT / "figures" / "paper.mplstyle"

# The paper's numbers (EXPERIMENTS.md), keyed by our model / subset / arm names.
PAPER_TABLE3 = {
    ("qwen2_5_vl_7b", "reasoning-image"): {"reprefill": 0.59, "blind": 0.41, "patch_r16": 0.64, "patch_r64": 0.59},
    ("qwen2_5_vl_7b", "retrieval-image"): {"reprefill": 0.74, "blind": 0.38, "patch_r16": 0.72, "patch_r64": 0.70},
    ("kimi_vl_a3b", "reasoning-image"): {"reprefill": 0.80, "blind": 0.57, "patch_r16": 0.79, "patch_r64": 0.82},
    ("kimi_vl_a3b", "retrieval-image"): {"reprefill": 0.55, "blind": 0.35, "patch_r16": 0.52, "patch_r64": 0.55},
}
PAPER_FIG5_MLA_BLIND_FLOOR = 0.44  # Kimi-VL blind-reuse KL in Fig. 5


def cli(description: str, default_group: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--group", default=default_group, help="results/raw/<group> to read")
    ap.add_argument("--results", default=os.environ.get("KAMERA_RESULTS", str(ROOT / "results" / "raw")))
    ap.add_argument("--out", default=None, help="output stem (default: results/tables/<group> or figures/<group>)")
    ap.add_argument("--tracking", default=os.environ.get("KAMERA_TRACKING", "disabled"),
                    choices=["disabled", "offline", "online"], help="also log the outputs to wandb (group = --group)")
    return ap.parse_args()


def publish(args: argparse.Namespace, paths: list[Path]) -> None:
    """Print where the outputs went and, with tracking on, attach them to a wandb run of the group."""
    print("wrote " + ", ".join(str(p) for p in paths))
    tracker = Tracker.start(args.tracking, "kamera", args.group, f"render-{args.group}", {"group": args.group},
                            ROOT / "outputs" / "wandb")
    tracker.log_files(paths)
    tracker.finish()


def read_rows(results: str | Path, group: str) -> pd.DataFrame:
    rows = load_rows(results, group)
    if rows.empty:
        raise SystemExit(f"no rows under {Path(results) / group}: run the sweep first (make {group.split('_')[0]})")
    return rows


def ci_cell(values, seed: int = 0) -> str:
    """'0.59 [0.46, 0.71]': the mean and its seeded 95% bootstrap interval."""
    mean, lo, hi = bootstrap_ci(list(values), seed=seed)
    return "–" if pd.isna(mean) else f"{mean:.2f} [{lo:.2f}, {hi:.2f}]"


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path


def save_figure(fig: plt.Figure, stem: Path) -> list[Path]:
    """PDF (no creation date: reruns are byte-identical) and PNG."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    pdf, png = stem.with_suffix(".pdf"), stem.with_suffix(".png")
    opts = {"bbox_inches": "tight", "pad_inches": 0.02}
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}, **opts)
    fig.savefig(png, metadata={"Software": None}, dpi=300, **opts)
    plt.close(fig)
    return [pdf, png]
