"""``make rehearse`` on the Table 3 and Fig. 5 configs, and the shaped-checkpoint command line's bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from shaped_support import need_real_tokenizer

from kamera.models import entry
from kamera.models.shaped.__main__ import main as shaped_main
from kamera.sweep import paper_experiments
from kamera.sweep.rehearse import main as rehearse_main
from kamera.sweep.rehearse import rehearsal_jobs, selection

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.shaped
@pytest.mark.full
def test_rehearse_runs_table3_and_fig5_end_to_end_on_shaped_checkpoints(shaped_cache, tmp_path):
    """Through the command line only, on fixture data: every job of both sweeps (Qwen2.5-VL, Qwen3-VL, Qwen3-Omni
    and Kimi-VL, all with adapters and writers) writes its rows."""
    ready = sorted({j.model for e in ("table3", "fig5") for j in rehearsal_jobs(e)})
    assert "kimi_vl_a3b" in ready and all(entry(m).has_adapter and entry(m).shaped for m in ready)
    for m in ready:
        need_real_tokenizer(m)
    env = {**os.environ, "KAMERA_SHAPED": shaped_cache, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "kamera.sweep.rehearse", "--experiments", "table3,fig5", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
    )
    log = (tmp_path / "rehearse.log").read_text() if (tmp_path / "rehearse.log").exists() else ""
    assert out.returncode == 0, out.stdout + out.stderr + log[-3000:]
    assert "all rehearsed jobs finished" in out.stdout
    assert "not rehearsed" not in out.stdout and "not run for" not in out.stdout
    assert "table3 at paper scale" in out.stdout and "H100-hours" in out.stdout
    rows = pd.concat([pd.read_parquet(p) for p in (tmp_path / "results").rglob("*.parquet")])
    jobs = set(zip(rows["model"], rows["bench"], rows["group"], strict=True))
    assert {("qwen2_5_vl_7b", "mm_niah", "table3"), ("kimi_vl_a3b", "mm_niah", "table3")} <= jobs
    assert {(m, "muirbench", "fig5") for m in ready} <= jobs
    assert rows["kl"].notna().all()
    assert (rows.loc[rows["arm"].str.startswith("patch"), "bytes"] > 0).all()
    assert {p.name for p in (tmp_path / "models").iterdir()} == {entry(m).repo_dir for m in ready}


def test_a_testbed_sweep_is_narrowed_by_testbed_and_gpu_probes_get_their_cpu_twin():
    """Fig. 10 sweeps testbeds: the rehearsal keeps the testbeds whose model is ready (a model= override would
    run that model on every testbed, audio options included); Fig. 11's ttft_cuda probe times on CPU as ttft."""
    ready = {"kimi_vl_a3b", "qwen2_5_vl_7b", "qwen3_vl_8b"}
    (narrow,) = selection(rehearsal_jobs("fig10"), ready)
    assert narrow.startswith("testbed=choice(") and "qwen2_5_omni_7b_audio" not in narrow
    assert "kimi_vl_a3b_mmlongbench_doc" in narrow and "qwen2_5_vl_7b_videomme" in narrow
    assert selection(rehearsal_jobs("fig11"), ready) == ["model=choice(kimi_vl_a3b,qwen2_5_vl_7b)", "probes=[ttft]"]
    assert selection(rehearsal_jobs("table3"), {"qwen2_5_vl_7b"}) == ["model=choice(qwen2_5_vl_7b)"]


def test_each_job_names_the_data_benchmark_its_shape_reads():
    """The fixture copies a rehearsal writes: a data benchmark for its own arm jobs, Video-MME for the window job cut
    from it (asked of the job's shape, kamera.job.shapes.shape_of)."""
    assert {(j.bench, j.data) for j in rehearsal_jobs("table3")} == {("mm_niah", "mm_niah")}
    assert {(j.bench, j.data) for j in rehearsal_jobs("appd")} == {("videomme_window", "videomme")}


def test_a_rehearsal_lays_out_its_inputs_runs_each_experiment_and_fails_on_any_failed_run(tmp_path, monkeypatch,
                                                                                          capsys):
    """The rehearsal's steps without weights (checkpoints and runs stubbed): a fixture copy of each data benchmark the
    jobs read, preflight then run per experiment with the paths every command gets, exit 1 naming the experiment whose
    run failed, the paper-scale estimate of each."""
    from kamera.sweep import rehearse as r

    made, commands = [], []
    monkeypatch.setattr(r, "models_root", lambda ready, path, **kw: path)
    monkeypatch.setattr(r, "make_fixture", lambda bench, data, **kw: made.append(bench))
    monkeypatch.setattr(r, "unreadable", lambda job, data: None)

    def run(cmd, env, log):
        commands.append(cmd)
        return (1 if "-m" in cmd[3:] and "experiment=appd" in cmd else 0), 1.0, 2**30

    monkeypatch.setattr(r, "_run", run)
    assert r.rehearse(["table3", "appd"], tmp_path) == 1
    out = capsys.readouterr().out
    assert sorted(made) == ["mm_niah", "videomme"]
    assert [c[2:5] for c in commands] == [["kamera.sweep", "--check", "experiment=table3"],
                                          ["kamera.run", "-m", "experiment=table3"],
                                          ["kamera.sweep", "--check", "experiment=appd"],
                                          ["kamera.run", "-m", "experiment=appd"]]
    paths = {f"paths.data={tmp_path / 'data'}", f"paths.results={tmp_path / 'results'}"}
    assert all(paths <= set(c) for c in commands)
    assert "table3: " in out and ": ok, 1 s" in out and "appd: " in out and "FAILED (exit 1" in out
    assert out.rstrip().endswith("FAILED: appd: run exit 1")
    assert "table3 at paper scale: ~" in out and "appd at paper scale: ~" in out


def test_every_non_tiny_experiment_is_a_paper_experiment():
    names = paper_experiments()
    assert {"table3", "fig5"} <= set(names) and not any(n.endswith("_tiny") for n in names)


def test_bad_input_fails_with_one_line(tmp_path, capsys):
    assert rehearse_main(["--experiments", "tabel3", "--out", str(tmp_path)]) == 2
    assert "unknown paper experiment(s) ['tabel3']" in capsys.readouterr().err
    assert shaped_main(["qwen9_vl", "--out", str(tmp_path)]) == 2
    assert "unknown model 'qwen9_vl'" in capsys.readouterr().err
    # a paper entry without a writer: model=hf (your own checkpoint; every paper model has one now)
    assert entry("hf").shaped is None
    assert shaped_main(["hf", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no shaped-checkpoint writer registered" in err and err.count("\n") == 1
    assert shaped_main(["tiny_llava", "--out", str(tmp_path)]) == 2
    assert "shaped checkpoints are written for paper models" in capsys.readouterr().err
    assert shaped_main(["smolvlm2", "--out", str(tmp_path), "--layers", "0"]) == 2
    assert shaped_main(["smolvlm2", "--out", str(tmp_path), "--tokenizers", str(tmp_path / "none")]) == 2
    assert shaped_main(["phi3_5_vision", "--out", str(tmp_path), "--vision-layers", "1"]) == 2
    err = capsys.readouterr().err
    assert "vision_layers >= 2" in err and err.count("\n") == 3  # the two smolvlm2 lines and this one
    assert list(tmp_path.iterdir()) == []
    target = tmp_path / "SmolVLM2-2.2B-Instruct"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    assert shaped_main(["smolvlm2", "--out", str(tmp_path)]) == 1
    assert "is not empty" in capsys.readouterr().err and (target / "keep.txt").exists()


def test_a_killed_writer_leaves_no_checkpoint(tmp_path, monkeypatch):
    """Written into a hidden sibling and renamed: a failure mid-way leaves neither a partial checkpoint nor the
    temporary directory."""
    from kamera.models.shaped import shaped_spec
    from kamera.models.shaped import writer as w

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(w, "write_tokenizer", boom)
    with pytest.raises(KeyboardInterrupt):
        w.write(shaped_spec("smolvlm2"), tmp_path / "ckpt", layers=1, vision_layers=1)
    assert list(tmp_path.iterdir()) == []


def test_ensure_writes_once_and_never_reuses_an_unfinished_copy(tmp_path, monkeypatch):
    """``shaped.json`` marks a finished copy: a second ensure writes nothing; a copy without it and a killed
    writer's staging directory are removed before writing again."""
    import kamera.models.shaped as shaped
    from kamera.models.shaped.writer import staged

    calls = []

    def fake_writer(out, *, layers, vision_layers, seed):
        calls.append(out)
        with staged(out) as tmp:
            (tmp / "shaped.json").write_text("{}")
        return out

    monkeypatch.setattr(shaped, "cache_key", lambda *a: "key")
    monkeypatch.setattr(shaped, "shaped_writer", lambda name: fake_writer)
    repo = entry("kimi_vl_a3b").repo_dir
    home = tmp_path / "key"
    (home / repo).mkdir(parents=True)
    (home / repo / "model-00001-of-00002.safetensors").write_text("partial")  # no shaped.json: unfinished
    (home / f".{repo}.tmp-999").mkdir()  # a killed writer's staging directory
    assert shaped.ensure("kimi_vl_a3b", tmp_path) == home
    assert sorted(p.name for p in home.iterdir()) == [".lock", repo] and os.listdir(home / repo) == ["shaped.json"]
    shaped.ensure("kimi_vl_a3b", tmp_path)
    assert len(calls) == 1
