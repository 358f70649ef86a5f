"""A row's identity is what produced it (issue 9, failures 1 and 2).

Failure 1: renderers counted every shard of a group, so a smoke run beside a full run doubled n, and
adding an arm re-ran the whole job. Failure 2: the key omitted the data and the checkpoint, so a
second benchmark copy or checkpoint directory reused the first one's rows.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from pipeline_support import job_config

from experiments import table3
from kamera import job
from kamera.data import make_fixture
from kamera.job import checks
from kamera.job.store import shards
from kamera.models import load_model
from kamera.run import runner
from kamera.sweep import compose_config, expand, manifest_line

TINY3 = ("experiment=table3_tiny", "testbed=tiny_llava", "arms=[reprefill,blind]")


def test_smoke_then_full_run_in_one_group_renders_the_full_runs_n(tmp_path, capsys):
    results = f"paths.results={tmp_path}/raw"
    runner.run(job_config(tmp_path, *TINY3, "n_items=1"))  # a smoke run in the same group
    runner.run(job_config(tmp_path, *TINY3, "n_items=2"))
    for respelled in ("model.dtype=fp32", "arms=[blind,reprefill]"):  # same job: nothing reruns, nothing doubles
        runner.run(job_config(tmp_path, *TINY3, "n_items=2", respelled))
    assert len(shards(tmp_path / "raw", "table3_tiny")) == 2
    table3.main([*TINY3, "n_items=2", results, "--out", str(tmp_path / "t3")])
    md = (tmp_path / "t3.md").read_text()
    assert "| chance / n | 0.25 / 2 |" in md, md
    assert "| reprefill |" in md and "rows: 1 job(s)" in md
    capsys.readouterr()


def test_adding_an_arm_computes_only_that_arm(tmp_path, monkeypatch):
    """The second run computes the new arms' rows only; each item is encoded once (the vision tower runs
    once per item) and its shared forwards run once; a third run with the same arms loads no model."""
    loaded, encoded = [], Counter()

    def load(*args, **kwargs):
        adapter = load_model(*args, **kwargs)
        encode = adapter.encode
        adapter.encode = lambda spans: encoded.update([len(loaded)]) or encode(spans)
        loaded.append(adapter)
        return adapter

    monkeypatch.setattr(runner, "load_model", load)
    base = ("model=tiny_qwen2_5_vl", "n_items=2")
    path = runner.run(job_config(tmp_path, *base, "arms=[blind,patch_r8]"))
    first = pd.read_parquet(path)
    assert loaded[0].forwards == Counter(full=2, solo=2, blind=2, patch=2)
    runner.run(job_config(tmp_path, *base, "arms=[blind,patch_r8,patch_r2,oracle4d]"))
    assert loaded[1].forwards == Counter(full=2, solo=2, blind=2, oracle=2, patch=2)  # patch_r2's query only
    assert encoded == Counter({1: 2, 2: 2})  # one encode per item and run
    rows = pd.read_parquet(path)
    assert len(rows) == 8 and rows.groupby(["item_id", "arm"]).size().eq(1).all()
    pd.testing.assert_frame_equal(rows.iloc[:4].reset_index(drop=True), first)  # the stored rows are untouched
    assert (rows.set_index("arm").loc["oracle4d", "kl_oracle"] == 0).all()
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a complete job loaded a model"))
    runner.run(job_config(tmp_path, *base, "arms=[oracle4d,patch_r2,blind,patch_r8]"))


def test_a_second_data_copy_runs_anew(tmp_path):
    a = make_fixture("mm_niah", tmp_path / "a", n=2)
    b = shutil.copytree(a, tmp_path / "b" / "MM-NIAH")
    same = shutil.copytree(a, tmp_path / "c" / "MM-NIAH")
    ann = b / "mm_niah_val" / "annotations" / "reasoning-image.jsonl"
    ann.write_text(ann.read_text().replace("Which way does the camera move", "Where does the camera go"))

    def run(root: Path) -> Path:
        return runner.run(job_config(tmp_path, "bench=mm_niah_reasoning", f"bench.root={root}", "arms=[blind]",
                                     "n_items=2"))

    first, second, third = run(a), run(b), run(same)
    assert first != second and third == first  # another copy is another job; a byte-identical copy is the same
    meta = json.loads(second.with_suffix(".json").read_text())
    assert list(meta["identity"]["data"]["files"]) == ["mm_niah_val/annotations/reasoning-image.jsonl"]
    assert len(pd.read_parquet(second)) == 2 and len(shards(tmp_path / "raw", "adhoc")) == 2


def checkpoint(path: Path, hidden: int, weights: bytes = b"\0" * 8) -> Path:
    """A checkpoint directory: config.json, one safetensors file (a real header, fake tensor bytes), a tokenizer."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "hidden_size": hidden}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + weights)
    (path / "tokenizer.json").write_text("{}")  # preflight wants a tokenizer beside weights (issue 19 item 8)
    return path


def test_a_second_checkpoint_path_runs_anew(tmp_path, monkeypatch):
    """model.path=/A then /B (another checkpoint) computes anew; a copy of /A reuses /A's rows. The weights
    are faked by a tiny model: what is tested is that the job's identity follows the directory loaded."""
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: load_model("tiny_qwen2_5_vl"))
    # the weight files are stand-ins (one tensor "w"), so preflight's check of their fit to config.json would refuse
    # them; that check is tested in tests/models/test_checkpoint_weights.py; this test is about identity
    monkeypatch.setattr(checks, "fit_problems", lambda name, ckpt: [])
    a, b = checkpoint(tmp_path / "A", 3584), checkpoint(tmp_path / "B", 4096)
    copy_a = shutil.copytree(a, tmp_path / "copy of A")
    checkpoint(tmp_path / "A2", 3584, weights=b"\1" * 8)  # other weight bytes, same header (issue 19 item 2)

    def job_for(path: Path):
        return job_config(tmp_path, "model=qwen2_5_vl_7b", f"model.path={path}", "model.dtype=float32",
                          "arms=[blind]", "n_items=1")

    fingerprints = {p.name: job.checkpoint_fingerprint(job_for(p)) for p in (a, b, copy_a, tmp_path / "A2")}
    assert fingerprints["A"] == fingerprints["copy of A"] != fingerprints["B"]
    assert fingerprints["A2"] not in (fingerprints["A"], fingerprints["B"])
    first, second = runner.run(job_for(a)), runner.run(job_for(b))
    assert first != second and len(pd.read_parquet(second)) == 1
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a copy of A recomputed"))
    assert runner.run(job_for(copy_a)) == first


def test_any_arm_knob_from_the_command_line(tmp_path):
    """A rank-3 patch and a 20% CacheBlend without a file; rows record the knobs and a label made from them,
    and the entries survive a manifest line."""
    arms = "arms=[blind,{patch_r16:{rank:3}},{name:cacheblend,ratio:0.2}]"
    (line,) = expand(["model=tiny_llava", arms, "n_items=1"])
    assert compose_config(line).arms == compose_config(["model=tiny_llava", arms]).arms
    assert manifest_line(line).count("'") == 2  # one shell-quoted word
    rows = pd.read_parquet(runner.run(job_config(tmp_path, *line))).set_index("arm")
    assert list(rows.index) == ["blind", "patch_r16[rank=3]", "cacheblend[ratio=0.2]"]
    assert rows.at["patch_r16[rank=3]", "rank"] == 3 and rows.at["patch_r16[rank=3]", "effective_rank"] == 3
    knobs = json.loads(rows.at["cacheblend[ratio=0.2]", "knobs"])
    assert knobs["ratio"] == 0.2 and knobs["check_layer"] == 1
    assert rows.at["cacheblend[ratio=0.2]", "recomputed_tokens"] > 0
    with pytest.raises(ValueError, match="has no knob"):
        job.build_specs("arm", [{"patch_r16": {"rnak": 3}}])
