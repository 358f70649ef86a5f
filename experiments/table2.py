"""Table 2: the operating-point menu of cross-chunk reuse, each point's measured cost and fidelity, per model.

    python -m experiments.table2 experiment=table2        # Qwen2.5-VL, Qwen3-VL, Kimi-VL on Video-MME segments
    python -m experiments.table2 experiment=table2_tiny

The paper's Table 2 states each point's mechanism, cost and where it holds; here every point is a
(window probe, variant) whose rows give the cost as measured (forwards run at the operation, forwards
behind the stored state it reads, bytes stored or recomputed for the chunk as a fraction of its KV page)
and the fidelity (η = 1 − KL/KL_blind, and the KL to the operation's re-prefill). The points:

    re-prefill (the floor)         deep_half / reprefill       (every probe's reference; here the deep-half window's)
    leading-segment reuse          leading / leading           (the window's first chunk from its stored canonical)
    exact per-context patch        deep_half / patch           (rank 32 formed on the window)
    reorder orbit-patch            reorder / orbit             (K = 3, rank 16, the test ordering held out)
    deep-half patch                deep_half / patch_deep      (and its η and bytes as fractions of the full patch's)
    reversible eviction: survivor  survivor / keep_as_is       (relocate only)
    reversible eviction: recall    recall / fresh_exact, τ = 1 (the rank-32 patch re-formed on the window the
                                                              chunk is recalled behind: its conditioned forward
                                                              is paid at the recall; the patch stored at eviction,
                                                              which pays none, is the stale one: Table 1)
    partial forward                refresh / deep_refresh, d ≥ 1 (bottom quarter reused, deep three quarters
                                                              re-prefilled in context after d antecedents changed)

A model without a point's rows shows "–". Choices: the deep-half "∼95%" is read as η_deep/η_full (means over
items), the byte ratio likewise; the partial forward's ℓ⋆/n_L is the mean fraction of layers it recomputed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from experiments.common import cli, table_outputs
from experiments.formats import partial_tag
from experiments.paper import paper_or
from experiments.windows import FRESH, eta_cell, mean, mean_of, models, num, ratio, records, select

# (operating point, mechanism, probe, variant, row filter) — Table 2 of the paper; the paper's cost and "where it
# holds" per point are conf/experiment/table2.yaml's paper.points.
POINTS = [
    ("re-prefill (the floor)", "one forward over the window", "deep_half", "reprefill", {}),
    ("leading-segment reuse", "truncate + relocate", "leading", "leading", {}),
    ("exact per-context patch", "rank-m SVD(Δ)", "deep_half", "patch", {}),
    ("reorder orbit-patch", "one patch / orbit", "reorder", "orbit", {}),
    ("deep-half patch", "deepest ∼ n_L/2 only", "deep_half", "patch_deep", {}),
    ("reversible eviction: survivor", "relocate", "survivor", "keep_as_is", {}),
    ("reversible eviction: recall", "patch recall", "recall", FRESH, {"tau": 1.0}),
    ("partial forward", "shallow reuse, deep recompute", "refresh", "deep_refresh", {"swapped": lambda d: d >= 1}),
]
COLUMNS = ["mechanism", "cost (paper)", "forwards at the operation", "stored forwards", "bytes / page",
           "η mean [95% CI]", "KL to re-prefill", "where it holds (paper)"]


def pick(recs: list[dict], model: str, probe: str, variant: str, where: dict) -> list[dict]:
    """The rows of one point: ``where`` maps a column to a value or a predicate."""
    got = select(recs, model=model, probe=probe, variant=variant)
    return [r for r in got if all(f(r.get(c)) if callable(f) else r.get(c) == f for c, f in where.items())]


def extra(point: str, got: list[dict], recs: list[dict], model: str, paper: dict) -> str:
    """What a point adds to its fidelity cell: deep-half vs the full patch, the orbit's deficit distance between
    orderings (mean ``delta_rel`` over its rows), the partial forward's layer share."""
    if point == "deep-half patch":
        full = pick(recs, model, "deep_half", "patch", {})
        eta, size = (
            ratio(mean_of(got, "eta"), mean_of(full, "eta")),
            ratio(mean_of(got, "bytes"), mean_of(full, "bytes")),
        )
        return f"; {num(eta)}× the full patch's η at {num(size)}× its bytes (paper {paper['deep_half']})"
    if point == "reorder orbit-patch":  # §5: the raw deficit is not order-invariant, the orbit patch still transfers
        dist = mean(r.get("delta_rel", math.nan) for r in got)  # "–" for rows stored before the column existed
        return f"; ‖Δπ − Δid‖/‖Δid‖ {num(dist)} (paper {paper['delta_rel']})"
    if point == "partial forward":
        return f"; {num(ratio(mean_of(got, 'recomputed_layers'), mean_of(got, 'n_layers')))} of the layers recomputed"
    return ""


def frame(rows: pd.DataFrame, paper: dict | None = None) -> pd.DataFrame:
    """One line per (operating point, model), the paper's cost and "where it holds" (conf/experiment/table2.yaml
    ``paper``) beside the measured ones."""
    paper = paper_or(paper, "table2")
    recs = records(rows)
    out = {}
    for point, mechanism, probe, variant, where in POINTS:
        stated = paper.get("points", {}).get(point, {})
        cost, holds = stated.get("cost", "–"), stated.get("holds", "–")
        for model, a in models(recs):
            got = pick(recs, model, probe, variant, where)
            if not got:
                out[(point, f"{model} ({a})")] = [mechanism, cost, *["–"] * 5, holds]
                continue
            out[(point, f"{model} ({a})")] = [
                mechanism,
                cost,
                num(mean_of(got, "forwards")),
                num(mean_of(got, "stored_forwards")),
                num(mean_of(got, "bytes_frac")),
                eta_cell(got) + extra(point, got, recs, model, paper),
                num(mean_of(got, "kl"), 3),
                holds,
            ]
    table = pd.DataFrame.from_dict(out, orient="index", columns=COLUMNS)
    table.index = pd.MultiIndex.from_tuples(table.index, names=["operating point", "model"])
    return table


def render(
    rows: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    table = frame(rows, paper)
    if table.empty:
        raise SystemExit(f"{group} has no window rows")
    notes = [
        "Cost as measured: forwards run at the operation (the variant's own query forward not counted), forwards "
        "behind the stored state it reads (the canonical, patches formed earlier), bytes stored or recomputed for "
        "the chunk / its KV page, means over items. η over items with a measurable deficit (a leading chunk has "
        "none: its KL shows the exactness). Paper columns: Table 2 of the preprint."
    ]
    return table_outputs(
        table,
        stem,
        f"Table 2 ({group}) — operating points, measured{partial_tag(footer)}",
        f"Operating points for cross-chunk KV reuse, measured cost and fidelity ({group}).",
        f"tab:{group}",
        footer,
        notes,
        math=False,
    )


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "table2", lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
