"""Each arm's per-sample log as lmms-eval 0.7.3 writes one, so its paired comparison (``--baseline``) can set an arm
against re-prefill.

    python -m experiments.export_lmms experiment=table3_tiny [overrides…] [--out DIR] [--arms A,B] [--allow-partial]

For every (model, benchmark, config) of the experiment's stored rows (:func:`experiments.common.load`, its refusals
included) and every arm there, re-prefill included as the baseline, it writes

    DIR/<model>/<arm>/<experiment>_samples_<benchmark>.jsonl   one line per scored item
    DIR/<model>/<arm>/<experiment>_results.json                the aggregate lmms-eval's loader reads beside it

(DIR: ``--out``, else ``outputs/lmms_eval/<experiment>``; a second config of one model and benchmark gets
``<model>-<config_key[:8]>``). A line carries ``doc_id`` (the item id), ``target`` (the gold answer as text),
``filtered_resps`` (the arm's prediction), ``input``, ``doc_hash``, ``score`` (the row's ``correct``, 0/1: the one
key with "score" in its name, numeric, so both sides of lmms-eval's comparison read it), ``cluster`` (the item's
bootstrap cluster, :func:`experiments.common.cluster_labels`; the results file's task config names it as
``cluster_key``) and a per-sample metric ``kamera`` (arm, KL to re-prefill, η, flip). Rows without a score
(``correct`` null: identity experiments) are left out; an arm with none is refused. Where each field is read in
lmms-eval: docs/export.md.

Refused in one line (exit 1): an experiment that does not expand or has no rows (:func:`experiments.common.load`),
a ``--arms`` name no row has, a group without re-prefill rows (nothing to pair with), an arm with no scored row,
an item twice in one arm's file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

import pandas as pd

from experiments.common import Experiment, load, write_text
from experiments.formats import cluster_labels, natural_order

BASELINE = "reprefill"  # the arm every other arm is compared with
SCORE_KEY = "score"  # the per-sample key both sides of lmms-eval's --baseline comparison read
CLUSTER_KEY = "cluster"  # the field a task's ``cluster_key`` names
DEFAULT_DIR = Path("outputs") / "lmms_eval"


def _plain(value: object) -> object:
    """A JSON value: numpy scalars as Python, NaN / None as null."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        return _plain(value.item())
    return value


def sample_line(row: pd.Series, cluster: str) -> dict:
    """One lmms-eval sample line of one (item, arm) row (the key order is the loader's: ``score`` is the first key
    with "score" in its name)."""
    prompt = _plain(row.get("prompt"))
    digest = _plain(row.get("input_sha256")) or hashlib.sha256(str(row["item_id"]).encode()).hexdigest()
    return {
        "doc_id": str(row["item_id"]),
        "target": "" if _plain(row["gold"]) is None else str(row["gold"]),
        "filtered_resps": "" if _plain(row["pred"]) is None else str(row["pred"]),
        "input": prompt if isinstance(prompt, str) else str(row["item_id"]),
        "doc_hash": digest,
        SCORE_KEY: float(row["correct"]),
        CLUSTER_KEY: cluster,
        "kamera": {
            SCORE_KEY: float(row["correct"]),
            CLUSTER_KEY: cluster,
            "arm": str(row["arm"]),
            "subset": _plain(row.get("subset")),
            "kl": _plain(row.get("kl")),
            "eta": _plain(row.get("eta")),
            "flip": _plain(row.get("flip")),
        },
    }


def results_json(task: str, model: str, arm: str, lines: list[dict], exp: Experiment) -> dict:
    """The ``<stem>_results.json`` lmms-eval's loader reads beside a samples file: the task's mean score, its config
    (``score_key``, ``cluster_key``) and where the rows came from."""
    scores = [line[SCORE_KEY] for line in lines]
    n = len(scores)
    mean = sum(scores) / n
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1)) if n > 1 else None
    return {
        "results": {task: {"alias": task, f"{SCORE_KEY},none": mean,
                           f"{SCORE_KEY}_stderr_clt,none": sd / math.sqrt(n) if sd is not None else "N/A"}},
        "configs": {task: {"task": task, "score_key": SCORE_KEY, "cluster_key": CLUSTER_KEY}},
        "n-samples": {task: {"original": n, "effective": n}},
        "model_name": f"{model}/{arm}",
        "kamera": {"experiment": exp.name, "arm": arm, "baseline": BASELINE, "rows": exp.footer},
    }


def export(exp: Experiment, out: Path, arms: list[str] | None = None) -> list[Path]:
    """Write every arm's samples and results files under ``out``; SystemExit (one line) on a refusal."""
    rows = exp.rows
    if rows.empty or "arm" not in rows:
        raise SystemExit(f"{exp.name}: no arm rows to export")
    unknown = [a for a in arms or [] if a not in set(rows["arm"].astype(str))]
    if unknown:
        have = ", ".join(natural_order(rows["arm"].astype(str)))
        raise SystemExit(f"{exp.name}: no rows of arm(s) {', '.join(unknown)} (have {have})")
    paths = []
    groups = list(rows.groupby(["model", "bench", "config_key"], sort=True))
    configs_per = pd.Series([(m, b) for (m, b, _), _ in groups]).value_counts()
    for (model, bench, config), group in groups:
        where = f"{exp.name}: {model} on {bench} (config {str(config)[:8]})"
        present = natural_order(group["arm"].astype(str), first=[BASELINE])
        if BASELINE not in present:
            raise SystemExit(f"{where} has no {BASELINE} rows: nothing to pair its arms with")
        chosen = [BASELINE] + [a for a in present if a != BASELINE and (arms is None or a in arms)]
        folder = out / (str(model) if configs_per[(model, bench)] == 1 else f"{model}-{str(config)[:8]}")
        for arm in chosen:
            sel = group[group["arm"].astype(str) == arm]
            sel = sel[sel["correct"].notna()] if "correct" in sel else sel.iloc[0:0]
            if sel.empty:
                raise SystemExit(f"{where}: arm {arm} has no scored row (correct is null): nothing lmms-eval can pair")
            twice = sel["item_id"][sel["item_id"].duplicated()].astype(str).tolist()
            if twice:
                raise SystemExit(f"{where}: arm {arm} has item(s) {', '.join(twice[:3])} twice (narrow the overrides)")
            lines = [sample_line(r, c) for (_, r), c in zip(sel.iterrows(), cluster_labels(sel), strict=True)]
            stem = folder / arm / exp.name
            samples = stem.with_name(f"{exp.name}_samples_{bench}.jsonl")
            text = "".join(json.dumps(line, ensure_ascii=False, allow_nan=False) + "\n" for line in lines)
            paths.append(write_text(samples, text))
            summary = results_json(str(bench), str(model), arm, lines, exp)
            paths.append(write_text(stem.with_name(f"{exp.name}_results.json"), json.dumps(summary, indent=2) + "\n"))
    return paths


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--arms", default=None)
    known, rest = own.parse_known_args(argv)
    try:
        exp = load(__doc__.split("\n\n")[0] + " (--arms A,B: only these besides re-prefill)", "table3_tiny", rest)
    except SystemExit as err:  # load's refusals, each cut to its first line (Hydra lists every experiment there)
        if isinstance(err.code, str):
            raise SystemExit(err.code.strip().split("\n", 1)[0]) from None
        raise
    arms = [a for a in known.arms.split(",") if a] if known.arms else None
    out = exp.out or DEFAULT_DIR / exp.name
    paths = export(exp, out, arms)
    print(f"wrote {len(paths)} files under {out} (baseline: {out}/<model>/{BASELINE}/): " + ", ".join(map(str, paths)))


if __name__ == "__main__":
    main()
