"""The toy model's reuse table through the harness API: ``python -m kamera.toy.evaluate [--n 1000]``.

Per query kind and arm (re-prefill, blind reuse, rank-m patches, full-rank patch): accuracy over the
answer words, KL(re-prefill ‖ arm) and η, plus the per-layer deficit and e90/n_B. Every number goes
through :class:`~kamera.reuse.context.ReuseContext` and ``kamera.metrics``, as the benchmarks do.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from kamera.metrics import bootstrap_ci, choice_argmax, e90_columns, eta, kl
from kamera.models import Adapter
from kamera.reuse.context import ReuseContext
from kamera.toy.items import ToyItem, items
from kamera.toy.model import DEFAULT_VARIANT, load
from kamera.toy.task import KINDS, VARIANTS

RANKS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


@dataclass
class ArmRow:
    """One arm on one query kind: accuracy, KL to re-prefill and η (η over items with a measurable deficit)."""

    arm: str
    accuracy: float
    kl_mean: float
    kl_median: float
    eta_mean: float
    eta_median: float
    eta_ci: tuple[float, float]
    n_eta: int


@dataclass
class KindReport:
    """All arms on ``n`` held-out items of one query kind, and where the deficit sits."""

    kind: str
    n: int
    chance: float
    rows: list[ArmRow]
    deficit_by_layer: list[dict[str, float]] = field(default_factory=list)  # mean ‖Δ‖/‖KV(B|A)‖ per channel
    e90_over_nb: float = float("nan")
    n_b: int = 0

    def row(self, arm: str) -> ArmRow:
        return next(r for r in self.rows if r.arm == arm)


def arm_logits(ctx: ReuseContext, ranks: Sequence[int]) -> dict[str, torch.Tensor]:
    """First-answer-token logits of every arm on one item (rank-m patches share one SVD)."""
    out = {"reprefill": ctx.reprefill_logits, "blind": ctx.blind.logits}
    for m in ranks:
        out[f"patch_r{m}"] = ctx.query(ctx.patch.truncate(m).apply(ctx.relocated), tag="patch").logits
    out["patch_full"] = ctx.query(ctx.patch.apply(ctx.relocated), tag="patch").logits
    return out


def evaluate_kind(adapter: Adapter, kind: str, n: int, seed: int = 0, ranks: Sequence[int] = RANKS) -> KindReport:
    """Run every arm on ``n`` held-out items of ``kind`` (the task and variant ``adapter`` was trained on)."""
    its: list[ToyItem] = items(adapter.task, kind, n, seed, adapter.variant)
    if not its:
        raise ValueError("evaluate needs at least one item")
    choice_ids = [adapter.tokenize(c)[0] for c in its[0].choices]
    correct: dict[str, list[bool]] = {}
    kls: dict[str, list[float]] = {}
    rel: list[list[list[float]]] = []
    e90: list[float] = []
    for it in its:
        ctx = ReuseContext(adapter, it.spans())
        logits = arm_logits(ctx, ranks)
        for arm, lg in logits.items():
            correct.setdefault(arm, []).append(choice_argmax(lg, choice_ids) == choice_ids[it.gold])
            kls.setdefault(arm, []).append(kl(ctx.reprefill_logits, lg))
        rel.append([
            [float(d.norm() / c.norm()) for d, c in zip(dl, cl, strict=True)]
            for dl, cl in zip(ctx.deficit.layers, ctx.conditioned.layers, strict=True)
        ])
        e90.append(e90_columns(ctx.patch, ctx.conditioned)["e90_nb_content"])
    rows = []
    for arm in correct:
        etas = [eta(k, b) for k, b in zip(kls[arm], kls["blind"], strict=True)]
        measured = [e for e in etas if e == e]
        mean, lo, hi = bootstrap_ci(measured)
        rows.append(ArmRow(
            arm, sum(correct[arm]) / n, statistics.fmean(kls[arm]), statistics.median(kls[arm]), mean,
            statistics.median(measured) if measured else float("nan"), (lo, hi), len(measured),
        ))
    names = [s.name for s in adapter.specs]
    deficit = [
        {names[c]: statistics.fmean(r[l][c] for r in rel) for c in range(len(names))} for l in range(adapter.n_layers)
    ]
    finite = [x for x in e90 if x == x]
    return KindReport(kind, n, 1 / len(choice_ids), rows, deficit, statistics.fmean(finite) if finite else float("nan"),
                      ctx.n_b)


def format_report(rep: KindReport) -> str:
    """A fixed-width table of one kind's arms, then its per-layer deficit."""
    lines = [f"{rep.kind}: n={rep.n}, n_B={rep.n_b}, chance {rep.chance:.3f}, e90/n_B on V {rep.e90_over_nb:.3f}",
             f"  {'arm':<12}{'acc':>7}{'KL mean':>11}{'KL median':>11}{'η mean':>9}{'95% CI':>17}{'η median':>10}"]
    for r in rep.rows:
        ci = f"[{r.eta_ci[0]:.3f}, {r.eta_ci[1]:.3f}]" if r.n_eta else "—"
        lines.append(f"  {r.arm:<12}{r.accuracy:>7.3f}{r.kl_mean:>11.3g}{r.kl_median:>11.3g}"
                     f"{r.eta_mean:>9.3f}{ci:>17}{r.eta_median:>10.3f}")
    for l, d in enumerate(rep.deficit_by_layer):
        lines.append(f"  layer {l} ‖Δ‖/‖KV(B|A)‖: " + "  ".join(f"{k} {v:.2e}" for k, v in d.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[KindReport]:
    """Print the per-arm table and rank curve for each query kind (and write them as JSON with ``--json``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", default=DEFAULT_VARIANT, choices=VARIANTS)
    p.add_argument("--path", default=None, help="a trained toy directory instead of the shipped weights")
    p.add_argument("--n", type=int, default=1000, help="held-out items per query kind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--ranks", default=",".join(map(str, RANKS)))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the reports here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    adapter = load(variant=args.variant, path=args.path)
    ranks = [int(r) for r in args.ranks.split(",") if r]
    reports = []
    for kind in args.kinds.split(","):
        rep = evaluate_kind(adapter, kind, args.n, args.seed, ranks)
        print(format_report(rep), flush=True)
        reports.append(rep)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in reports], f, indent=1)
    return reports


if __name__ == "__main__":
    main()
