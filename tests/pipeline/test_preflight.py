"""Typos and bad inputs fail before any model loads, each problem one line, all together (issue 9,
failures 4 and 5): on main, ``experiment=tabel3_tiny`` ran the default job and exited 0, and bad
values or data defects surfaced after the model had loaded, several as tracebacks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from pipeline_support import ROOT, env, job_config

from kamera import job
from kamera.data import make_fixture
from kamera.job import CONF_DIR, JobError
from kamera.run import runner
from kamera.sweep import SweepError, compose_config, main


@pytest.fixture
def no_model(monkeypatch):
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


@pytest.mark.parametrize(("override", "valid"), [("experiment=tabel3_tiny", "table3_tiny"),
                                                 ("testbed=tiny_kimii", "tiny_kimi")])
def test_a_typoed_experiment_or_testbed_fails_listing_the_valid_ones(override, valid, capsys):
    with pytest.raises(SweepError, match=rf"Could not find '{override.replace('=', '/')}'[\s\S]*\t{valid}\n"):
        compose_config([override])
    assert main(["--check", override]) == 1 and f"\t{valid}" in capsys.readouterr().err


@pytest.mark.integration
def test_a_typoed_experiment_fails_the_cli_without_running_a_job(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kamera.run", "experiment=tabel3_tiny",
                           f"paths.results={tmp_path}/raw"], cwd=ROOT, env=env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "Could not find 'experiment/tabel3_tiny'" in proc.stderr
    assert not (tmp_path / "raw").exists()


BAD_VALUES = {
    "n_items=-1": "n_items=-1: must be an integer from 1 to 10,000,000",
    "n_items=2.5": "n_items=2.5: must be an integer from 1 to 10,000,000",
    "n_items=10000000000000000000000": "n_items=10000000000000000000000: must be an integer from 1 to 10,000,000",
    "seed=x": "seed='x': must be an integer >= 0",
    "model.dtype=bf17": "model.dtype='bf17': must be one of",
    "canonical_context=bogus": "canonical_context='bogus': must be one of ['prefix', 'native', 'none']",
    "eta_floor=abc": "eta_floor='abc': must be a number >= 0",
    "item_offset=-5": "item_offset=-5: must be an integer >= 0",
    "bench=window_synthetic item_offset=20": "item_offset=20: places an arm job's items; a window, agent or engine",
    "max_new_tokens=0": "max_new_tokens=0: must be an integer >= 1",
    "threads=0": "threads=0: must be auto",
    "device=tpu": "device='tpu': must be auto, cpu, cuda",
    "+bench.kwargs.bogus=1": "bench.kwargs ['bogus'] are not options of synthetic; it takes ['n_a_chunks'",
    "group=a/b": "group='a/b': must be a non-empty name without '/'",
    "model.attn_implementation=flash": "model.attn_implementation='flash': must be one of",
    "arms=[blind,{patch_r16:{rank:-2}}]": "patch: rank must be a non-negative int",
    "arms=[blind,blind]": "arms lists ['blind'] twice",
    "arms=[blind,{name:nope}]": "unknown arm 'nope'; registered arms: blind",
}


@pytest.mark.parametrize("override", sorted(BAD_VALUES))
def test_preflight_catches_every_bad_value_before_any_model_loads(override, tmp_path, no_model):
    with pytest.raises(JobError) as err:
        runner.run(job_config(tmp_path, *override.split()))
    assert BAD_VALUES[override] in str(err.value)
    assert "Traceback" not in str(err.value) and not (tmp_path / "raw").exists()


def test_every_problem_is_reported_together_one_line_each(tmp_path):
    problems = job.preflight(job_config(tmp_path, "n_items=-1", "seed=x", "model.dtype=bf17", "eta_floor=abc",
                                        "canonical_context=bogus", "arms=[blind,patch_r999]"))
    assert len(problems) == 6 and all("\n" not in p for p in problems), problems


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_device_cuda_without_cuda_is_a_preflight_error(tmp_path, no_model):
    with pytest.raises(JobError, match="device=cuda: CUDA is not available here"):
        runner.run(job_config(tmp_path, "device=cuda"))


def test_an_arm_file_without_a_name_is_a_preflight_error(tmp_path, monkeypatch, no_model):
    conf = shutil.copytree(CONF_DIR, tmp_path / "conf")
    (conf / "arm" / "patch_r24.yaml").write_text("rank: 24\n")
    monkeypatch.setattr(job.spec, "CONF_DIR", conf)
    with pytest.raises(JobError, match=r"patch_r24.yaml must map `name:`"):
        runner.run(job_config(tmp_path, "arms=[blind,patch_r24]"))


def _niah(tmp_path):
    return make_fixture("mm_niah", tmp_path / "data", n=2)


def _empty(tmp_path):
    (tmp_path / "data" / "MM-NIAH").mkdir(parents=True)
    return tmp_path / "data" / "MM-NIAH"


def _no_images(tmp_path):
    root = _niah(tmp_path)
    shutil.rmtree(root / "mm_niah_val" / "images")
    return root


def _corrupt_media(tmp_path):
    root = _niah(tmp_path)
    for png in (root / "mm_niah_val" / "images" / "needles").glob("*.png"):
        png.write_bytes(png.read_bytes()[:40])
    return root


def _truncated_line(tmp_path):
    root = _niah(tmp_path)
    ann = root / "mm_niah_val" / "annotations" / "reasoning-image.jsonl"
    text = ann.read_text()
    ann.write_text(text[: len(text) - 20] + "\n")
    return root


def _partial_annotations(tmp_path):
    root = _niah(tmp_path)
    (root / "mm_niah_val" / "annotations" / "reasoning-image.jsonl").write_text("")
    return root


def _truncated_parquet(tmp_path):
    root = make_fixture("muirbench", tmp_path / "data", n=2)
    (parquet,) = (root / "data").glob("*.parquet")
    parquet.write_bytes(parquet.read_bytes()[:100])
    return root


DEFECTS = {
    _empty: ("mm_niah_reasoning", "missing file: ", "annotations/reasoning-image.jsonl"),
    _no_images: ("mm_niah_reasoning", "image root missing", "(unpacked images.tar.gz)"),
    _corrupt_media: ("mm_niah_reasoning", "data defect, mm_niah/reasoning-image/val/", "cannot decode image"),
    _truncated_line: ("mm_niah_reasoning", "data defect, reasoning-image.jsonl:line2 (row)", "invalid JSON"),
    _partial_annotations: ("mm_niah_reasoning", "mm_niah: no item can be selected", "0 items selected of 0"),
    _truncated_parquet: ("muirbench", "is not a readable parquet file", "test-00000-of-00001.parquet"),
}


@pytest.mark.parametrize("defect", list(DEFECTS), ids=lambda f: f.__name__.strip("_"))
def test_preflight_catches_data_defects_before_any_model_loads(defect, tmp_path, no_model):
    bench, *messages = DEFECTS[defect]
    root = defect(tmp_path)
    with pytest.raises(JobError) as err:
        runner.run(job_config(tmp_path, f"bench={bench}", f"bench.root={root}", "n_items=2"))
    for message in messages:
        assert message in str(err.value), str(err.value)
    assert not (tmp_path / "raw").exists()


def test_preflight_is_clean_on_good_data_and_json_errors_name_their_file(tmp_path):
    root = _niah(tmp_path)
    assert job.preflight(job_config(tmp_path, "bench=mm_niah_reasoning", f"bench.root={root}")) == []
    bad = make_fixture("milebench", tmp_path / "mile", n=2)
    first = sorted(bad.glob("*/*.json"))[0]
    first.write_text(json.dumps({"meta_data": {}})[:-3])
    problems = job.preflight(job_config(tmp_path, "bench=milebench_temporal", f"bench.root={bad}",
                                        f"bench.subset={first.parent.name}"))
    assert any(str(first) in p for p in problems), problems


def test_one_set_of_canonical_contexts_per_item_shape(tmp_path):
    """Issue 31 item 2: kamera.job held two hand-written sets (checks: prefix/native/none; window_shape: prefix/none).
    Both are right for their shape; each is now read off the context that interprets it, and pinned here."""
    import re
    from typing import get_args

    from kamera.job.checks import CANONICAL_CONTEXTS
    from kamera.reuse.context import CanonicalContext
    from kamera.window.context import WindowCanonical
    from kamera.window.shape import WINDOW_CONTEXTS

    assert CANONICAL_CONTEXTS == get_args(CanonicalContext) == ("prefix", "native", "none")
    assert WINDOW_CONTEXTS == get_args(WindowCanonical) == ("prefix", "none")
    documented = re.search(r"^canonical_context: .*# .*: (.*) \(", (CONF_DIR / "config.yaml").read_text(), re.M)
    assert documented and documented.group(1).split(" | ") == list(CANONICAL_CONTEXTS)
    window = ("model=tiny_kimi", "bench=window_synthetic", "arms=[]", "window_probes=[recall]", "n_items=1")
    assert [p for p in job.preflight(job_config(tmp_path, *window, "canonical_context=native"))
            if p.startswith("canonical_context='native': a window job") and "['prefix', 'none']" in p]
    assert not job.preflight(job_config(tmp_path, "bench=synthetic", "arms=[blind]", "n_items=1",
                                        "canonical_context=native"))
    (line,) = [p for p in job.preflight(job_config(tmp_path, *window, "canonical_context=nowhere"))
               if p.startswith("canonical_context=")]
    assert "must be one of ['prefix', 'native', 'none']" in line
