"""Each tiny twin of Tables 4–8 and Figs. 6, 7, 9, 10 runs for real and renders.

One session fixture runs every twin once, small (two items, one or two of its testbeds), through
``kamera.run.runner.run`` on the composed experiment config (the path ``make <name>`` takes), then renders it
with its renderer's ``main`` (the path ``make render`` takes) into a temporary directory. The tests read
those outputs: every file is there, the rows have the columns the golden tests assume, and the numbers
that must hold at any scale do (exact identities of the arms and probes).
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pandas as pd
import pytest
from pipeline.pipeline_support import job_config
from rows_support import ROW_COLUMNS

from kamera.job import store
from kamera.run import runner
from kamera.sweep import expand

pytestmark = pytest.mark.integration  # the session fixture runs and renders every twin

# each twin at two items on one or two of its testbeds (overrides of the composed tiny config)
TWINS = {
    "table4": ["testbed=toy_binding,tiny_kimi"],
    "table5": ["testbed=toy_binding"],
    "table6": ["testbed=toy_binding_two_hop,tiny_llava"],
    "table7": ["testbed=toy_binding_two_hop,tiny_qwen3_vl"],
    "table8": ["testbed=toy_binding_two_hop,tiny_kimi"],
    "fig6": ["testbed=toy_binding_two_hop,tiny_qwen2_5_vl"],
    "fig7": ["testbed=toy_binding_two_hop,tiny_qwen3_vl_moe"],
    "fig9": ["testbed=tiny_llava,tiny_kimi"],
    "fig10": ["testbed=toy_binding,tiny_qwen2_5_vl"],
}
FIGURES = {"fig6", "fig7", "fig9", "fig10"}


@pytest.fixture(scope="session")
def twins(tmp_path_factory) -> dict[str, tuple[Path, pd.DataFrame, pd.DataFrame]]:
    """name → (output stem, rows, probe records) of the twin's sweep, run and rendered once."""
    tmp = tmp_path_factory.mktemp("twins")
    out = {}
    for name, overrides in TWINS.items():
        sweep = [f"experiment={name}_tiny", "n_items=2", *overrides, f"paths.results={tmp}/raw"]
        for job in expand(sweep):
            runner.run(job_config(tmp, *job))
        stem = tmp / name
        importlib.import_module(f"experiments.{name}").main([*sweep, "--out", str(stem)])
        shards = list(store.shards(tmp / "raw", f"{name}_tiny"))
        out[name] = (stem, pd.concat([s.rows() for s in shards]), pd.concat([s.table("probes") for s in shards]))
    return out


@pytest.mark.parametrize("name", list(TWINS))
def test_twin_renders_every_output(twins, name):
    stem, rows, _ = twins[name]
    suffixes = [".pdf", ".png", ".md"] if name in FIGURES else [".md", ".tex"]
    for suffix in suffixes:
        assert stem.with_suffix(suffix).stat().st_size > 0, suffix
    md = stem.with_suffix(".md").read_text()
    # the provenance footer: code, libraries, device and dtype, the data copy and the checkpoint read
    assert re.search(r"dtype float32, data \S+, checkpoint \S+_$", md.rstrip()) and "job(s), commit" in md
    assert set(ROW_COLUMNS) == set(rows.columns)  # the golden tests' hand-built rows have the real columns
    if name == "table8":
        assert stem.with_name(stem.name + "_sweep").with_suffix(".pdf").stat().st_size > 0


def test_table4_twin_single_hop_is_unchanged_and_blind_breaks_two_hop(twins):
    _, rows, _ = twins["table4"]
    toy = rows[rows["model"] == "toy_binding"].groupby(["subset", "arm"])["correct"].mean()
    assert toy["control_b", "blind"] == toy["control_b", "reprefill"] == 1.0  # read from B alone: lossless
    assert toy["two_hop", "blind"] < toy["two_hop", "patch_r16"] == toy["two_hop", "reprefill"] == 1.0


def test_table7_twin_isolates_the_deficit(twins):
    """native: blind ≡ oracle (loss-KL = KL_blind); prefix: relocation adds a control far below the loss."""
    stem, rows, _ = twins["table7"]
    for model, m in rows.groupby("model"):
        oracle = m[m["arm"] == "oracle4d"].groupby("item_id")["kl"].first()
        blind = m[m["arm"] == "blind"]
        native, prefix = blind[blind["delta"] == 0], blind[blind["delta"] != 0]  # the native canonical has δ = 0
        assert len(native) == len(prefix) == 2, model
        assert native.set_index("item_id")["kl"].to_numpy() == pytest.approx(oracle[native["item_id"]].to_numpy(),
                                                                               rel=1e-3)
        assert (prefix["kl_oracle"] > 0).all() and (prefix["kl_oracle"] < 0.1 * prefix["kl"]).all(), model
    assert "gap@4" in stem.with_suffix(".md").read_text()


def test_fig6_twin_probes_span_the_depth(twins):
    _, _, probes = twins["fig6"]
    depth = probes[probes["probe"] == "injection_depth"]
    for _, g in depth.groupby(["model", "item_id"]):
        g = g.sort_values("layer")
        assert g["explained"].iloc[0] == 0 and g["explained"].iloc[-1] == pytest.approx(1.0)
    assert (probes.loc[probes["probe"] == "deficit_heads", "energy"] >= 0).all()
