"""Table 1 and the turnover curve at tiny scale: ``python -m kamera.window.demo [--n 64] [--models …] [--all]``.

Runs the recall sweep (τ = 0, 0.2, …, 1.0, stale vs fresh rank-32 patch) and the survivor probe
(keep-as-is vs a rank-64 removal patch) on the trained toy window model (``toy_window``, items of
:mod:`kamera.toy.window_task`, where the effects are real) and on tiny random models of each attention
kind (synthetic noise-frame streams: identities and costs only, their numbers are noise), then prints
Table 1 per model and the turnover curve. ``--all`` also runs every other probe (reorder at K = 3, 4
and 6, deep-half, App. D, App. E) and prints the mean per (probe, setting, variant); ``--json`` writes
every row.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import torch

from kamera.models import load_model
from kamera.toy.window_task import window_items as toy_items
from kamera.window.benches import synthetic
from kamera.window.probes import make_probe
from kamera.window.summary import (
    format_curve,
    format_means,
    format_table1,
    means,
    run,
    table1,
    turnover_curve,
)

MODELS = ("toy_window", "tiny_qwen2_5_vl", "tiny_qwen3_vl", "tiny_kimi", "tiny_llava")
# the other probes, each with the toy window task's stream it reads (and that stream's number of states)
OTHERS = [
    *((make_probe("reorder", n_chunks=k), "reorder", k) for k in (3, 4, 6)),
    (make_probe("deep_half"), "recall", 0),
    (make_probe("divergent"), "divergent", 3),
    (make_probe("excess"), "excess", 0),
    (make_probe("refresh"), "refresh", 4),
    (make_probe("revert"), "recall", 0),
    (make_probe("disposability"), "recall", 0),
    (make_probe("forks"), "recall", 0),
]


def items_for(adapter, kind: str, n: int, seed: int, n_states: int = 3):
    """The toy window task's items for the toy window model, synthetic streams (window 5) otherwise."""
    if getattr(adapter, "variant", None) == "window":
        return toy_items(adapter.task, kind, n, seed, n_states=n_states or 3)
    return synthetic.window_items(adapter, n, window=5, seed=seed)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--n", type=int, default=64, help="items per probe for the toy window model")
    p.add_argument("--n-tiny", type=int, default=8, help="items per probe for each tiny random model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--all", action="store_true", help="also run every other probe and print per-variant means")
    p.add_argument("--json", default=None, help="also write every row here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    recall, survivor = make_probe("recall"), make_probe("survivor")
    rows, t0 = [], time.time()
    for name in args.models.split(","):
        adapter = load_model(name)
        n = args.n if name == "toy_window" else args.n_tiny
        print(f"{name}: recall and survivor on {n} items each …", flush=True)
        rows += run(adapter, items_for(adapter, "recall", n, args.seed), [recall])
        rows += run(adapter, items_for(adapter, "survivor", n, args.seed), [survivor])
        if args.all:
            for probe, kind, n_states in OTHERS:
                rows += run(adapter, items_for(adapter, kind, n, args.seed, n_states), [probe])
    models = list(dict.fromkeys(r["model"] for r in rows))
    print("\nTable 1 (recall at full turnover τ = 1: stale vs fresh rank-32 patch; survivor: keep-as-is vs rank-64 "
          "removal patch; η = 1 − KL/KL_blind, rm η_keep = 1 − KL/KL_keep)")
    print(format_table1([table1(rows, m) for m in models]))
    for m in models:
        print()
        print(format_curve(m, turnover_curve(rows, m)))
    if args.all:
        print("\nEvery probe: mean over items per (probe, setting, variant); bytes = fraction of the chunk's page; "
              "fw / stored = forwards paid at the operation / behind the stored state it reads")
        by_k = means(rows, by=lambda r: f"K={r['n_chunks']}" if r["probe"] == "reorder" else r["setting"])
        print(format_means([s for s in by_k if s["probe"] not in ("recall", "survivor")]))
    print(f"\n{len(rows)} rows in {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
        print(f"rows written to {args.json}")
    return rows


if __name__ == "__main__":
    main()
