"""App. E, reversible edits: the clean-view revert, the disposability test and copy-on-write forks, as checks.

    python -m experiments.appe experiment=appe        # Qwen2.5-VL, Qwen3-VL, Kimi-VL on Video-MME segments
    python -m experiments.appe experiment=appe_tiny

Reads the ``revert``, ``disposability`` and ``forks`` window rows of exactly the experiment's jobs; writes
<paths.tables>/<experiment>.md and .tex: one line per check, the paper's claim beside one column per
model. App. E states these as properties ("Both directions are exact and reversible", "a check that
costs one decode rather than a recompute", "the cost of a per-branch patch rather than a duplicated
cache") and flags the last two as design-space openings rather than measured results, so the paper
column quotes the claim each check tests; a count k/n is over items.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from experiments.common import cli, table_outputs
from experiments.formats import partial_tag
from experiments.paper import paper_or
from experiments.windows import eta_cell, mean_of, models, num, ratio, records, select

CHECKS = [  # the checks, in order; the paper's claim each tests is conf/experiment/appe.yaml's paper.claims
    "revert: KV bitwise the stored canonical",
    "revert: query bitwise blind reuse",
    "revert: cost",
    "re-add: KV and query bitwise the patched cache",
    "re-add: cost",
    "disposability: the call matches whether blind reuse flips the answer",
    "disposability: items called disposable / load-bearing",
    "disposability: cost per test",
    "forks: every branch reads the one shared canonical",
    "forks: bytes per branch vs a duplicated page",
    "forks: all branches, shared canonical + patches vs duplicated pages",
    "forks: η of a branch's patch",
]


def count(got: list[dict], column: str) -> str:
    """'k/n': rows where ``column`` is true."""
    return f"{sum(bool(r[column]) for r in got)}/{len(got)}" if got else "–"


def column(recs: list[dict], model: str) -> list[str]:
    """One model's cells, in CHECKS order ("–" where its rows are missing)."""
    rv = select(recs, model=model, probe="revert")
    revert, readd = select(rv, variant="revert"), select(rv, variant="readd")
    page = mean_of(select(rv, variant="reprefill"), "bytes")  # the chunk's KV page (what re-prefill recomputes)
    dp = select(recs, model=model, probe="disposability")
    off = select(dp, variant="patch_off")
    refs = select(dp, variant="reprefill") or select(rv, variant="reprefill")
    forks = select(recs, model=model, probe="forks", variant="fork")
    both = [r for r in readd if r["exact_kv"] and r["exact_logits"]]
    branches = {}
    for r in forks:
        branches.setdefault(r["item_id"], []).append(r)
    shared = [ratio(r0["bytes_shared"] + sum(b["bytes"] for b in bs), sum(b["bytes_duplicated"] for b in bs))
              for bs in branches.values() for r0 in bs[:1]]
    return [
        count(revert, "exact_kv"),
        count(revert, "exact_logits"),
        f"{num(mean_of(revert, 'forwards'))} forwards, copies "
        f"{num(ratio(mean_of(revert, 'bytes_written'), page))}× the page"
        if revert
        else "–",
        f"{len(both)}/{len(readd)}" if readd else "–",
        f"{num(mean_of(readd, 'forwards'))} forwards, adds {num(mean_of(readd, 'bytes_frac'))}× the page"
        if readd
        else "–",
        count(off, "call_correct"),
        f"{sum(bool(r['disposable']) for r in off)} / {sum(bool(r['load_bearing']) for r in off)} of {len(off)}"
        if off
        else "–",
        f"{num(mean_of(off, 'decode_forwards'))} decode forwards vs {num(mean_of(refs, 'forwards'))} re-prefill"
        if off
        else "–",
        count(forks, "shares_canonical"),
        f"{num(ratio(mean_of(forks, 'bytes'), mean_of(forks, 'bytes_duplicated')))}×" if forks else "–",
        f"{num(sum(shared) / len(shared))}× over {num(sum(map(len, branches.values())) / len(branches), 1)} branches"
        if shared
        else "–",
        eta_cell(forks) if forks else "–",
    ]


def frame(rows: pd.DataFrame, paper: dict | None = None) -> pd.DataFrame:
    claims = paper_or(paper, "appe").get("claims", {})
    recs = [r for r in records(rows) if r["probe"] in ("revert", "disposability", "forks")]
    table = pd.DataFrame({"paper (App. E)": [claims.get(c, "–") for c in CHECKS]}, index=list(CHECKS))
    for model, a in models(recs):
        table[f"{model} ({a})"] = column(recs, model)
    table.index.name = "check"
    return table


def render(
    rows: pd.DataFrame, group: str, stem: Path, footer: str = "", paper: dict | None = None
) -> tuple[str, list[Path]]:
    table = frame(rows, paper)
    if table.shape[1] == 1:
        raise SystemExit(f"{group} has no revert, disposability or forks window rows")
    notes = [
        "The chunk behind a k-chunk window, patched at rank 32 in the live cache. Revert: its slots overwritten with "
        "the stored relocated canonical; re-add: the patched KV written back. Disposability: the answer decoded with "
        "the patch on and after the revert; the call (disposable = the answer did not move) is right when it agrees "
        "with whether blind reuse flips the re-prefill decision. Forks: one branch per recall window of the chunk, "
        "each a rank-32 patch over the one shared canonical; a duplicated cache stores the chunk's page per branch."
    ]
    return table_outputs(
        table,
        stem,
        f"App. E ({group}) — reversible edits, checked{partial_tag(footer)}",
        f"Conditioning as a reversible switch ({group}).",
        f"tab:{group}",
        footer,
        notes,
        math=False,
    )


def main(argv: list[str] | None = None) -> None:
    cli(__doc__, "appe", lambda exp: render(exp.rows, exp.name, exp.stem("table"), exp.footer, exp.paper), argv)


if __name__ == "__main__":
    main()
