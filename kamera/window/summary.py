"""Run probes over window items and reduce their rows to Table 1 and the turnover curve.

:func:`run` is the per-item loop (one :class:`WindowContext` per item, every probe on it, progress
logged); :func:`table1` and :func:`turnover_curve` are pure functions of rows, the numbers a renderer
prints: recall at full turnover (stale η, fresh η, flip-recover stale → fresh) and the survivor
(keep-as-is KL, removal-patch η), and η against τ for the stale and the fresh patch.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kamera.items.window import WindowItem
from kamera.metrics import bootstrap_ci, flip_recover
from kamera.models.base import Adapter
from kamera.progress import Progress
from kamera.window.context import WindowCanonical, WindowContext
from kamera.window.probes import ProbeRefusal, WindowProbe

log = logging.getLogger(__name__)


def run(adapter: Adapter, items: Sequence[WindowItem], probes: Sequence[WindowProbe],
        canonical_context: WindowCanonical = "prefix", every_s: float = 10.0) -> list[dict]:
    """Every probe on every item; rows get ``model``. A probe refusing an item is logged once and skipped."""
    rows, refused, progress = [], set(), Progress(len(items), what="window items", every_s=every_s)
    for item in items:
        wctx = WindowContext(adapter, item, canonical_context)
        for probe in probes:
            try:
                got = probe.run(wctx)
            except ProbeRefusal as why:
                if probe.name not in refused:
                    log.warning("probe %s skips item %s (and maybe others): %s", probe.name, item.item_id, why)
                refused.add(probe.name)
                continue
            rows += [{"model": adapter.name, **r} for r in got]
        progress.step()
    return rows


def mean(values: Iterable[float]) -> float:
    """Mean over the finite values (NaN if none)."""
    v = [x for x in values if x == x]
    return statistics.fmean(v) if v else math.nan


def median(values: Iterable[float]) -> float:
    v = [x for x in values if x == x]
    return statistics.median(v) if v else math.nan


def select(rows: Iterable[dict], **keys) -> list[dict]:
    """The rows whose columns equal ``keys``."""
    return [r for r in rows if all(r.get(k) == v for k, v in keys.items())]


@dataclass
class Table1Row:
    """One model's Table 1 line: recall at full turnover and the survivor probe."""

    model: str
    n_recall: int
    stale_eta: float
    stale_eta_median: float
    fresh_eta: float
    fresh_eta_ci: tuple[float, float]
    n_flips: int
    stale_flip_recover: float
    fresh_flip_recover: float
    n_survivor: int
    keep_kl: float
    keep_kl_over_blind: float
    removal_eta: float
    removal_eta_keep: float


def table1(rows: Sequence[dict], model: str, tau: float = 1.0) -> Table1Row:
    """Table 1's numbers for one model from its recall and survivor rows (recall at turnover ``tau``)."""
    rec = select(rows, model=model, probe="recall", tau=tau)
    stale, fresh = select(rec, variant="stale_patch"), select(rec, variant="fresh_patch")
    _, lo, hi = bootstrap_ci([r["eta"] for r in fresh])
    surv = select(rows, model=model, probe="survivor")
    keep, removal = select(surv, variant="keep_as_is"), select(surv, variant="removal_patch")
    return Table1Row(
        model, len(stale), mean(r["eta"] for r in stale), median(r["eta"] for r in stale),
        mean(r["eta"] for r in fresh), (lo, hi), sum(r["flip"] for r in stale),
        flip_recover([r["flip"] for r in stale], [r["recovered"] for r in stale]),
        flip_recover([r["flip"] for r in fresh], [r["recovered"] for r in fresh]),
        len(keep), mean(r["kl"] for r in keep),
        mean(r["kl"] / r["kl_blind"] if r["kl_blind"] > 0 else math.nan for r in keep),
        mean(r["eta"] for r in removal), mean(r["eta_keep"] for r in removal),
    )


def turnover_curve(rows: Sequence[dict], model: str) -> list[dict]:
    """Per τ: mean and median η of the stale and the fresh patch, and the re-prefill's accuracy."""
    rec = select(rows, model=model, probe="recall")
    out = []
    for tau in sorted({r["tau"] for r in rec}):
        at = select(rec, tau=tau)
        stale, fresh = select(at, variant="stale_patch"), select(at, variant="fresh_patch")
        out.append({
            "tau": tau, "n": len(stale),
            "stale_eta": mean(r["eta"] for r in stale), "stale_eta_median": median(r["eta"] for r in stale),
            "fresh_eta": mean(r["eta"] for r in fresh), "fresh_eta_median": median(r["eta"] for r in fresh),
            "stale_kl": mean(r["kl"] for r in stale), "blind_kl": mean(r["kl_blind"] for r in stale),
            "reprefill_correct": mean(r["correct"] for r in select(at, variant="reprefill")),
            "stale_correct": mean(r["correct"] for r in stale),
        })
    return out


def format_table1(lines: Sequence[Table1Row]) -> str:
    """Table 1 as fixed-width text."""
    out = [
        f"{'model':<18}{'n':>4}{'stale η':>10}{'(median)':>10}{'fresh η':>9}{'95% CI':>17}{'flips':>7}"
        f"{'stale→fresh':>14}{'n':>5}{'keep KL':>10}{'/blind':>8}{'rm η':>8}{'rm η_keep':>10}",
    ]
    for t in lines:
        ci = f"[{t.fresh_eta_ci[0]:.2f}, {t.fresh_eta_ci[1]:.2f}]"
        fr = f"{t.stale_flip_recover:.2f}→{t.fresh_flip_recover:.2f}"
        out.append(
            f"{t.model:<18}{t.n_recall:>4}{t.stale_eta:>10.2f}{t.stale_eta_median:>10.2f}{t.fresh_eta:>9.2f}{ci:>17}"
            f"{t.n_flips:>7}{fr:>14}{t.n_survivor:>5}{t.keep_kl:>10.2g}{t.keep_kl_over_blind:>8.2f}"
            f"{t.removal_eta:>8.2f}{t.removal_eta_keep:>10.2f}"
        )
    return "\n".join(out)


def format_curve(model: str, curve: Sequence[dict]) -> str:
    """The turnover curve as fixed-width text."""
    out = [f"{model}: η vs turnover τ",
           f"  {'τ':>5}{'n':>5}{'stale η':>10}{'median':>9}{'fresh η':>9}{'median':>9}{'stale KL':>11}{'blind KL':>11}"
           f"{'acc ref':>9}{'acc stale':>10}"]
    for c in curve:
        out.append(
            f"  {c['tau']:>5.2f}{c['n']:>5}{c['stale_eta']:>10.2f}{c['stale_eta_median']:>9.2f}{c['fresh_eta']:>9.2f}"
            f"{c['fresh_eta_median']:>9.2f}{c['stale_kl']:>11.3g}{c['blind_kl']:>11.3g}{c['reprefill_correct']:>9.2f}"
            f"{c['stale_correct']:>10.2f}"
        )
    return "\n".join(out)


def means(rows: Sequence[dict], by: Callable[[dict], str] = lambda r: r["setting"]) -> list[dict]:
    """Per (model, probe, ``by(row)`` (default the setting), variant), in first-seen order: items, mean / median
    η, mean KL, flip-recover, mean bytes fraction and forwards paid / stored."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r.get("model", ""), r["probe"], by(r), r["variant"]), []).append(r)
    return [
        {"model": m, "probe": p, "setting": s, "variant": v, "n": len(g),
         "eta": mean(r["eta"] for r in g), "eta_median": median(r["eta"] for r in g), "kl": mean(r["kl"] for r in g),
         "flip_recover": flip_recover([r["flip"] for r in g], [r["recovered"] for r in g]),
         "bytes_frac": mean(r["bytes_frac"] for r in g), "forwards": mean(r["forwards"] for r in g),
         "stored_forwards": mean(r["stored_forwards"] for r in g)}
        for (m, p, s, v), g in groups.items()
    ]


def format_means(stats: Sequence[dict]) -> str:
    """:func:`means` as fixed-width text."""
    out = [f"{'model':<16}{'probe':<14}{'setting':<16}{'variant':<16}{'n':>4}{'η':>8}{'median':>8}{'KL':>10}"
           f"{'flip→':>7}{'bytes':>7}{'fw':>5}{'stored':>7}"]
    for s in stats:
        out.append(
            f"{s['model']:<16}{s['probe']:<14}{s['setting']:<16}{s['variant']:<16}{s['n']:>4}{s['eta']:>8.2f}"
            f"{s['eta_median']:>8.2f}{s['kl']:>10.3g}{s['flip_recover']:>7.2f}{s['bytes_frac']:>7.2f}"
            f"{s['forwards']:>5.1f}{s['stored_forwards']:>7.1f}"
        )
    return "\n".join(out)
