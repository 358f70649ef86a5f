"""experiments.export_lmms: each arm's samples file in lmms-eval 0.7.3's form, paired with re-prefill by doc_id.

The format checks read the files as lmms-eval's loader and comparison do (docs/export.md cites the lines). With
``LMMS_EVAL_PYTHON`` set to an interpreter that has the real ``lmms_eval`` 0.7.3 (a side venv: docs/export.md),
the last test also runs its own ``load_baseline`` and ``paired_ttest`` on the exported files."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from experiments import export_lmms
from experiments.common import Experiment
from tests.experiments.rows_support import frame, row

# 4 items on 2 documents; blind loses two of them, the patch one
SCORES = {"reprefill": [1, 1, 0, 1], "blind": [0, 1, 0, 0], "patch_r8": [1, 1, 0, 0]}
ITEMS = ["doc-a/q0", "doc-a/q1", "doc-b/q0", "doc-b/q1"]


def experiment(rows: pd.DataFrame, tmp_path: Path) -> Experiment:
    return Experiment("golden_tiny", [], rows, pd.DataFrame(), [], "rows: golden", tmp_path, tmp_path, None,
                      "disabled", {}, list(SCORES))


def golden_rows(**extra) -> pd.DataFrame:
    return frame([
        row("tiny_kimi", item, arm, correct=float(s), pred="A" if s else "B", gold="A",
            cluster_key=item.split("/")[0], **extra)
        for arm, scores in SCORES.items() for item, s in zip(ITEMS, scores, strict=True)
    ])


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def first_score(sample: dict) -> float | None:
    """The value lmms-eval's loader takes: the first key with "score" in its name, when numeric."""
    key = next((k for k in sample if "score" in k.lower()), None)
    return float(sample[key]) if key is not None and isinstance(sample[key], (int, float)) else None


def test_each_arm_pairs_with_reprefill_by_doc_id(tmp_path):
    paths = export_lmms.export(experiment(golden_rows(), tmp_path), tmp_path / "out")
    base = tmp_path / "out" / "tiny_kimi"
    for arm, scores in SCORES.items():
        samples = base / arm / "golden_tiny_samples_mmlongbench_doc.jsonl"
        results = base / arm / "golden_tiny_results.json"
        assert samples in paths and results in paths
        # the loader's rule: <stem>_samples_<task>.jsonl, and <stem>_results.json beside it
        assert samples.name.split("_samples_")[0] + "_results.json" == results.name
        lines = read(samples)
        by_doc = {s["doc_id"]: first_score(s) for s in lines}  # doc_id -> score, as load_baseline builds it
        assert by_doc == dict(zip(ITEMS, map(float, scores), strict=True))
        assert all(s["score"] in (0.0, 1.0) for s in lines)
        assert [s["cluster"] for s in lines] == ["doc-a", "doc-a", "doc-b", "doc-b"]
        assert all(isinstance(s["target"], str) and s["filtered_resps"] in ("A", "B") for s in lines)
        summary = json.loads(results.read_text())
        task = summary["configs"]["mmlongbench_doc"]
        assert task["score_key"] == "score" and task["cluster_key"] == "cluster"
        assert summary["results"]["mmlongbench_doc"]["score,none"] == pytest.approx(sum(scores) / 4)
    # the comparison: every blind line finds its re-prefill line by doc_id
    name = "golden_tiny_samples_mmlongbench_doc.jsonl"
    baseline = {s["doc_id"]: s["score"] for s in read(base / "reprefill" / name)}
    paired = [(s["score"], baseline[s["doc_id"]]) for s in read(base / "blind" / name) if s["doc_id"] in baseline]
    assert len(paired) == 4 and sum(c - b for c, b in paired) / 4 == pytest.approx(-0.5)


def test_refusals_are_one_line(tmp_path):
    rows = golden_rows()
    with pytest.raises(SystemExit, match="no reprefill rows"):
        export_lmms.export(experiment(rows[rows["arm"] != "reprefill"], tmp_path), tmp_path)
    with pytest.raises(SystemExit, match="no rows of arm"):
        export_lmms.export(experiment(rows, tmp_path), tmp_path, ["patch_r99"])
    unscored = rows.assign(correct=rows["correct"].where(rows["arm"] != "blind"))
    with pytest.raises(SystemExit, match="arm blind has no scored row"):
        export_lmms.export(experiment(unscored, tmp_path), tmp_path)
    with pytest.raises(SystemExit, match="twice"):
        export_lmms.export(experiment(pd.concat([rows, rows.iloc[:1]]), tmp_path), tmp_path)
    with pytest.raises(SystemExit, match="no arm rows"):
        export_lmms.export(experiment(pd.DataFrame(), tmp_path), tmp_path)


def test_cli_refuses_an_unknown_experiment(capsys):
    with pytest.raises(SystemExit) as err:
        export_lmms.main(["experiment=no_such_experiment"])
    assert "no_such_experiment" in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_an_experiment_without_rows(tmp_path):
    with pytest.raises(SystemExit) as err:
        export_lmms.main(["experiment=table3_tiny", f"paths.results={tmp_path}", "--allow-partial"])
    assert "no stored rows" in str(err.value) and "\n" not in str(err.value)


REAL = """
import json, sys, types
from lmms_eval.baselines import load_baseline
registry = types.ModuleType("lmms_eval.api.registry")  # only the decorators: the registry imports `evaluate` and torch
registry.register_aggregation = lambda name: (lambda f: f)
registry.register_metric = lambda **kw: (lambda f: f)
sys.modules["lmms_eval.api.registry"] = registry
from lmms_eval.api.metrics import paired_ttest
base, base_agg = load_baseline(sys.argv[1], "mmlongbench_doc")
arm, _ = load_baseline(sys.argv[2], "mmlongbench_doc")
ids = [d for d in arm if d in base]
out = paired_ttest([arm[d] for d in ids], [base[d] for d in ids])
mean = base_agg["results"]["mmlongbench_doc"]["score,none"]
print(json.dumps({"n": len(ids), "mean_diff": out["mean_diff"], "base_mean": mean}))
"""


@pytest.mark.skipif(not os.environ.get("LMMS_EVAL_PYTHON"), reason="LMMS_EVAL_PYTHON: a python with lmms-eval 0.7.3")
def test_the_real_lmms_eval_reads_and_pairs_the_files(tmp_path):
    export_lmms.export(experiment(golden_rows(), tmp_path), tmp_path / "out")
    base = tmp_path / "out" / "tiny_kimi"
    files = [str(base / a / "golden_tiny_samples_mmlongbench_doc.jsonl") for a in ("reprefill", "blind")]
    done = subprocess.run([os.environ["LMMS_EVAL_PYTHON"], "-c", REAL, *files], capture_output=True, text=True,
                          timeout=60, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"n": 4, "mean_diff": pytest.approx(-0.5), "base_mean": pytest.approx(0.75)}
