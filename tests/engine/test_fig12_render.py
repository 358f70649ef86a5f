"""Fig. 12's engine panels read an experiment's live-engine jobs: KL, ULP shares and maxima, agreement and timing per
source (the rows as kamera.engine.shape writes them; the jobs themselves: tests/engine/test_engine_jobs.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import torch

from experiments import fig11
from experiments.fig12 import EngineRecords, clock_lines, engine_markdown, engine_panels, engine_plot
from kamera.core import ChannelSpec, ChunkKV
from kamera.engine.measure import ulp_stats

ARMS = {"reprefill": 0.0, "unrotated": 3e-2, "blind": 2e-2, "patch_r8": 1e-4, "patch_r64": 1e-6, "patch_r256": 1e-9,
        "patch_full": 1e-10}


def rows(source: str, scale: float) -> list[dict]:
    out = []
    for i in range(4):
        for arm, kl in ARMS.items():
            pred = i % 4 if arm in ("reprefill", "patch_r256") or i else (i + 1) % 4  # item 0 flips below full rank
            worst = {"k": [kl * 100 * (i + 1), 2.0], "v": [0.0, 3.0 * i]}  # ULP maxima per layer, channel
            out.append(
                {
                    "source": source,
                    "model": "tiny",
                    "dtype": "float32",
                    "bench": "b",
                    "subset": "",
                    "seed": 0,
                    "item_id": f"i{i}",
                    "arm": arm,
                    "kl": kl * scale,
                    "recovered": True,
                    "pred": pred,
                    "gold": 0,
                    "correct": pred == 0,
                    "n_choices": 4,
                    "seconds": 0.1,
                    "ulp_le1": 1.0 - kl,
                    "ulp_le1_l0": 1.0,
                    "ulp_le4": 1.0,
                    "ulp_max_element": 2.0 * max(max(v) for v in worst.values()),  # an element near zero reads more
                    "ulp_max_element_l0": kl * 200 * (i + 1),
                    "ulp_max": max(max(v) for v in worst.values()),
                    "ulp_max_l0": kl * 100 * (i + 1),
                    "ulp_max_by_layer": json.dumps(worst),
                }
            )
    return out


def timing(n: int = 1, dtype: str = "float32") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "model": "tiny",
                "dtype": dtype,
                "item_id": f"i{i}",
                "probe": "timing",
                "prompt_tokens": 100,
                "claimed_tokens": 90 if n == 1 else 80,
                "spliced_tokens": 50,
                "ttft_prefill_s": 0.02 if n == 1 else 0.004 * (i + 1),
                "ttft_splice_s": 0.01 if n == 1 else 0.002,
                "compose_s": 9e-4 if n == 1 else 8e-4,
                "write_s": 9e-5 if n == 1 else 8e-5,
            }
            for i in range(n)
        ]
    )


def test_engine_panels_split_the_sources_and_read_every_quantity(tmp_path):
    records = EngineRecords(
        pd.DataFrame(rows("vllm", 1.0) + rows("own", 2.0)), timing(), "engine jobs g: footer", tmp_path / "clock.md"
    )
    panels = engine_panels(records)
    kl = panels["kl"].set_index(["model", "arm"])["kl_mean"]
    assert kl[("tiny · float32 · vllm", "blind")] == 2e-2 and kl[("tiny · float32 · own", "blind")] == 4e-2
    agree = panels["agree"].set_index(["model", "arm"])["agreement"]
    assert (
        agree[("tiny · float32 · vllm", "patch_r8")] == 0.75 and agree[("tiny · float32 · vllm", "patch_r256")] == 1.0
    )
    ulp = panels["ulp"].set_index(["model", "arm"])
    assert ulp.loc[("tiny · float32 · own", "unrotated"), "le1"] == 1.0 - 3e-2
    assert ulp.loc[("tiny · float32 · vllm", "unrotated"), "max"] == 12.0  # the last item: K at layer 0, 3 · 4
    assert ulp.loc[("tiny · float32 · vllm", "unrotated"), "max_l0"] == 12.0
    per_layer = panels["ulp_max"].set_index(["model", "arm", "channel"])["max_by_layer"]
    assert per_layer[("tiny · float32 · vllm", "blind", "k")] == [8.0, 2.0]  # max over items, layer by layer
    assert per_layer[("tiny · float32 · vllm", "blind", "v")] == [0.0, 9.0]
    t = panels["timing"].iloc[0]
    assert round(t["write_us"], 6) == 1.0 and round(t["compose_us"], 6) == 10.0
    md = "\n".join(engine_markdown(panels, records))
    assert "| tiny · float32 · vllm | patch_r64 | 4 | 1.00e-06 | 1.00e-06 | 0.00 | 1.00e-10 |" in md
    assert (
        "| tiny · float32 · own | blind | 4 | 4.00e-02 | 4.00e-02 | 0.00 | 2.00e-10 |" in md
        and "write µs / token" in md
    )
    assert "| tiny · float32 · vllm | blind | k | 8 · 2 |" in md


def test_panel_b_reports_the_ulp_maximum_per_element_and_per_vector_and_draws_the_per_element_one(tmp_path):
    """Fig. 12(b) prints both scales of the maximum (per element, each at its own value; per vector, at the token-head's
    largest magnitude) and its bars are the per-element maximum, the paper's "within one bf16 ULP" (docs/metrics.md)."""
    records = EngineRecords(pd.DataFrame(rows("vllm", 1.0)), timing(), "engine jobs g: footer", tmp_path / "clock.md")
    panels = engine_panels(records)
    ulp = panels["ulp"].set_index(["model", "arm"]).loc[("tiny · float32 · vllm", "unrotated")]
    assert (ulp["max_element"], ulp["max_element_l0"], ulp["max"], ulp["max_l0"]) == (24.0, 24.0, 12.0, 12.0)
    md = "\n".join(engine_markdown(panels, records))
    assert "max ULP per element, all layers | max ULP per element, layer 0 | max ULP per vector, all layers" in md
    assert "| tiny · float32 · vllm | unrotated | 4 | 0.9700 | 1.0000 | 1.0000 | 24 | 24 | 12 | 12 |" in md
    fig = engine_plot(panels, "t")
    drawn = {round(bar.get_height(), 9) for bar in fig.axes[1].patches}
    assert max(drawn) == 24.0 and 12.0 not in drawn and fig.axes[1].get_yscale() == "log"


def test_ulp_stats_keeps_the_per_element_maximum_beside_the_per_vector_one():
    """One element two ULPs off at its own small value is 2 per element and far below one at its vector's scale."""
    spec = ChannelSpec("k", 1, 4)
    ref = torch.tensor([[[1.0, 2.0**-6, 0.5, 0.25]]])
    got = ref.clone()
    got[..., 1] += 2 * 2.0**-13  # two bf16 ULPs at 2^-6 (2^-6 · 2^-7 each)
    stats = ulp_stats(ChunkKV([spec], [(got,)], torch.arange(1)), ChunkKV([spec], [(ref,)], torch.arange(1)))
    assert stats["ulp_max_element"] == stats["ulp_max_element_l0"] == 2.0
    assert stats["ulp_max"] == stats["ulp_max_l0"] == 2 * 2.0**-13 / 2.0**-7
    assert stats["ulp_le1"] == 0.75 and json.loads(stats["ulp_max_by_layer"]) == {"k": [stats["ulp_max"]]}


def test_fig11_prints_the_engines_ttft_as_a_second_source(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "figure_records", Path(__file__).parents[1] / "diagnostics" / "figure_records.py"
    )
    records = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(records)
    engine = EngineRecords(
        pd.DataFrame(), timing(3, "bfloat16"), "engine jobs g: rows: 1 job(s)", tmp_path / "clock.md"
    )
    plain, _ = fig11.render(records.fig11_rows(), records.fig11_probes(), "g", tmp_path / "plain")
    md, _ = fig11.render(records.fig11_rows(), records.fig11_probes(), "g", tmp_path / "with", engine=engine)
    assert "second source" not in plain and md.startswith(plain.split("\n_rows")[0].rstrip()[:200])
    assert "| tiny | bfloat16 | 3 | 100 | 80 | 8.00 | 2.00 | 10.00 | 1.00 |" in md and "engine jobs g: " in md


def test_the_fair_clock_table_is_printed_beside_the_engine_panels_when_it_has_run(tmp_path):
    path = tmp_path / "engine_clock" / "clock.md"
    assert clock_lines(path) == []
    path.parent.mkdir()
    path.write_text("# Engine clock: ck (float32)\n\n| n_B | (iii)/(ii) |\n|---|---|\n| 2048 | 0.05 |\n")
    lines = clock_lines(path)
    assert lines[1].startswith("*Engine clock: ck (float32)") and "| 2048 | 0.05 |" in lines
