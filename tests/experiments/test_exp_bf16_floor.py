"""The bf16 reference floor table on hand-built rows (golden markdown and LaTeX, the paper's values beside a paper
model's bf16 line only, blind over floor, model-dtype / float32 factor pairs), and its tiny twin end to end."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from rows_support import frame, row

from experiments import bf16_floor

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FOOTER = "rows: fixed"
ARMS = {"blind": 0.05, "patch_full": 1e-3, "patch_full_fp32": 1e-5, "patch_r16": 8e-3, "patch_r16_fp32": 7e-3,
        "patch_r64": 2e-3, "patch_r64_fp32": 1.5e-3}


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("KAMERA_REGOLD"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file"


def floor_rows() -> pd.DataFrame:
    """A paper model in bf16 and a tiny one in bf16 and float32, four items on two videos; KLs scale with the item;
    float32 factors double the bytes in bf16; the float32 tiny model has every KL a thousand times lower."""
    rows = []
    for model, dtype, scale in (("qwen2_5_vl_7b", "bfloat16", 1.0), ("tiny_qwen2_5_vl", "bfloat16", 1.0),
                                ("tiny_qwen2_5_vl", "float32", 1e-3)):
        for item in range(4):
            for arm, base in ARMS.items():
                kl = base * scale * (1 + 0.1 * item)
                r = row(model, f"{model}-{item}", "blind", kl=kl, kl_blind=ARMS["blind"] * (1 + 0.1 * item),
                        dtype=dtype, cluster_key=f"video{item // 2}", bytes_frac=0.0)
                rank = arm.removeprefix("patch_r").removesuffix("_fp32")
                r.update(
                    arm=arm,
                    arm_name="blind" if arm == "blind" else "patch",
                    eta=1 - kl / r["kl_blind"],
                    bytes_frac=0.0
                    if arm == "blind"
                    else (2 if arm.endswith("_fp32") and dtype == "bfloat16" else 1)
                    * (1.0 if "full" in arm else int(rank) / 256),
                )
                rows.append(r)
    return frame(rows)


def test_bf16_floor_golden_and_the_papers_values(tmp_path):
    md, paths = bf16_floor.render(floor_rows(), "golden", tmp_path / "bf16_floor", FOOTER)
    golden("bf16_floor.md", md)
    golden("bf16_floor.tex", paths[1].read_text())
    t = bf16_floor.frame(floor_rows())
    assert list(t.index) == [
        ("qwen2_5_vl_7b", "bfloat16"),
        ("tiny_qwen2_5_vl", "bfloat16"),
        ("tiny_qwen2_5_vl", "float32"),
    ]
    paper, tiny = t.loc[("qwen2_5_vl_7b", "bfloat16")], t.loc[("tiny_qwen2_5_vl", "bfloat16")]
    assert paper["floor: KL full rank, model-dtype factors"].endswith("(paper ≈ 1e-3)")
    assert paper["KL blind"].endswith("(paper 0.03–0.12)")
    assert "paper" not in tiny["KL blind"] and "paper" not in t.loc[("tiny_qwen2_5_vl", "float32")]["KL blind"]
    assert paper["blind / floor"] == "50×"  # the medians' ratio, 0.05 / 1e-3 at every item scale
    assert paper["r16 bytes (model / float32)"] == "6.2% / 12.5%"
    assert paper["r64 η (model / float32)"] == "0.960 / 0.970"
    assert (
        t.loc[("tiny_qwen2_5_vl", "float32")]["blind / floor"] == "50×"
    )  # the float32 blind KL is as far below as the floor
    assert paper["n"] == "4"


def test_bf16_floor_refuses_rows_without_the_floor_arm(tmp_path):
    rows = floor_rows()
    with pytest.raises(SystemExit, match="no patch_full rows"):
        bf16_floor.render(rows[rows["arm"] != "patch_full"], "g", tmp_path / "f")


@pytest.mark.integration
def test_bf16_floor_tiny_runs_and_renders(tmp_path):
    """``make bf16_floor``'s path at two items on tiny_kimi in both dtypes: in bf16 the float32-factor full-rank
    patch is at or below the floor on every item and its factors cost twice the bytes; in float32 the knob changes
    nothing (the same KL and bytes as the model-dtype patch)."""
    from pipeline.pipeline_support import job_config

    from kamera.job import store
    from kamera.run import runner
    from kamera.sweep import expand

    sweep = ["experiment=bf16_floor_tiny", "n_items=2", "testbed=tiny_kimi", f"paths.results={tmp_path}/raw"]
    for job in expand(sweep):
        runner.run(job_config(tmp_path, *job))
    bf16_floor.main([*sweep, "--out", str(tmp_path / "bf16_floor")])
    rows = pd.concat([s.rows() for s in store.shards(tmp_path / "raw", "bf16_floor_tiny")])
    assert sorted(rows["dtype"].unique()) == ["bfloat16", "float32"]
    for dtype, g in rows.groupby("dtype"):
        by = {
            a: g[g["arm"] == a].set_index("item_id")
            for a in ("patch_full", "patch_full_fp32", "patch_r16", "patch_r16_fp32")
        }
        assert len(by["patch_full"]) == 2
        assert (by["patch_full_fp32"]["kl"] <= by["patch_full"]["kl"]).all(), dtype
        ratio = by["patch_r16_fp32"]["bytes"] / by["patch_r16"]["bytes"]
        assert (ratio == (2 if dtype == "bfloat16" else 1)).all(), dtype
        if dtype == "float32":
            assert (by["patch_full_fp32"]["kl"] == by["patch_full"]["kl"]).all()
    md = (tmp_path / "bf16_floor.md").read_text()
    assert "| tiny_kimi | bfloat16 |" in md and "| tiny_kimi | float32 |" in md
