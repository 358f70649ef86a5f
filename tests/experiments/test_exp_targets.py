"""The paper results that had no target (issue 21): the reorder table on hand-built window rows (golden markdown and
LaTeX, the paper's values beside a paper model's, the per-K orderings)."""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from experiments import reorder

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FOOTER = "rows: fixed"


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("KAMERA_REGOLD"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file"


def window_row(model: str, attention: str, item: int, probe: str, variant: str, eta: float, **cols) -> dict:
    kl_blind = 0.5 + 0.1 * item
    return {"shape": "window", "model": model, "family": model, "attention": attention, "item_id": f"{model}-{item}",
            "cluster_key": f"video{item // 2}", "probe": probe, "arm": probe, "variant": variant, "eta": eta,
            "kl": kl_blind * (1 - eta), "kl_blind": kl_blind, "flip": False, "recovered": eta > 0.5, **cols}


def reorder_rows() -> pd.DataFrame:
    """Two models (the paper's MLA backbone and a tiny GQA one) at K = 3 (exhaustive) and, for the first, K = 4;
    one row per (item, test ordering, variant): transfer < orbit < exact, delta_rel growing with the ordering."""
    rows = []
    for model, attention, ks in (("kimi_vl_a3b", "MLA", (3, 4)), ("tiny_qwen2_5_vl", "GQA", (3,))):
        for k in ks:
            orders = ["".join(map(str, p)) for p in itertools.permutations(range(k))][1:]
            for item in range(4):
                for j, order in enumerate(orders):
                    tag = {"setting": f"K={k} order={order}", "order": order, "n_chunks": k,
                           "n_orderings": math.factorial(k), "exhaustive": True, "delta_rel": 0.4 + 0.01 * j}
                    for variant, eta in (("transfer", 0.7 - 0.02 * item), ("exact", 0.95), ("orbit", 0.9 - 0.01 * k)):
                        rows.append(window_row(model, attention, item, "reorder", variant, eta, **tag))
                    rows.append(window_row(model, attention, item, "reorder", "reprefill", 1.0, **tag))
    return pd.DataFrame(rows)


def test_reorder_golden_and_the_papers_values(tmp_path):
    md, paths = reorder.render(reorder_rows(), "golden", tmp_path / "reorder", FOOTER)
    golden("reorder.md", md)
    golden("reorder.tex", paths[1].read_text())
    t = reorder.frame(reorder_rows())
    assert list(t.index) == [("kimi_vl_a3b (MLA)", 3), ("kimi_vl_a3b (MLA)", 4), ("tiny_qwen2_5_vl (GQA)", 3)]
    assert t.at[("kimi_vl_a3b (MLA)", 4), "orderings"] == "24 (exhaustive)"
    assert "(paper 0.85)" in t.at[("kimi_vl_a3b (MLA)", 4), "η orbit (π held out)"]  # the orbit's η at K = 4
    assert "(paper 0.94)" in t.at[("kimi_vl_a3b (MLA)", 3), "η exact (π's own)"]
    assert "paper" not in t.at[("tiny_qwen2_5_vl (GQA)", 3), "‖Δπ − Δid‖/‖Δid‖"]
    assert t.at[("kimi_vl_a3b (MLA)", 3), "η orbit − exact"] == "-0.08"
    assert "n 20, 2 clusters" in t.at[("kimi_vl_a3b (MLA)", 3), "η exact (π's own)"]  # 4 items × 5 orderings


def test_reorder_refuses_rows_without_reorder_probes(tmp_path):
    with pytest.raises(SystemExit, match="no reorder window rows"):
        reorder.render(reorder_rows().assign(probe="survivor"), "g", tmp_path / "r")
