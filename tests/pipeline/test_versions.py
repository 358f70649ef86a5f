"""Issue 19 item 1: a code change invalidates the rows it changes. Every row, probe record and refusal is stamped
with its plugin's ``version``, the row metrics' ``metrics_version`` and the run that wrote it; a bump recomputes
exactly the rows it covers, ``force=true`` recomputes all of a job's, renderers refuse one arm's rows of two
versions in one cell, and a shard written before versions existed reads as version 1."""

from __future__ import annotations

import logging
import re

import pandas as pd
import pytest
from pipeline_support import job_config

from experiments import table3
from kamera.arms import ARMS
from kamera.job import spec as job_spec
from kamera.job.store import Shard
from kamera.probes import PROBES
from kamera.run import runner
from kamera.sweep.status import sweep_jobs
from kamera.window.probes import PROBES as WINDOW_PROBES

JOB = ("model=tiny_kimi", "bench=synthetic", "arms=[blind,patch_r8]", "probes=[deficit_norms]", "n_items=2")
TINY3 = ("experiment=table3_tiny", "testbed=tiny_llava", "arms=[reprefill,blind]")


def _run(tmp_path, *overrides: str, caplog=None) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Run the job; (its rows, its probe records, what it logged)."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kamera.run"):
        path = runner.run(job_config(tmp_path, *JOB, *overrides))
    probes = path.with_name(path.name.replace(".parquet", ".probes.parquet"))
    return pd.read_parquet(path), pd.read_parquet(probes), caplog.text


def _by_arm(rows: pd.DataFrame, arm: str) -> pd.DataFrame:
    return rows[rows["arm"] == arm].sort_values("item_id").reset_index(drop=True)


def test_every_plugin_declares_an_integer_version():
    for registry in (ARMS, PROBES, WINDOW_PROBES):
        for name, cls in registry.items():
            assert isinstance(cls.version, int) and not isinstance(cls.version, bool) and cls.version >= 1, name


def test_a_plugin_with_a_bad_version_is_one_line(monkeypatch):
    monkeypatch.setattr(ARMS["blind"], "version", "2")
    with pytest.raises(ValueError, match=r"^BlindArm.version='2': a arm's code version is an integer >= 1$"):
        job_spec.build_specs("arm", ["blind"])


def test_a_version_bump_recomputes_that_arms_rows_only(tmp_path, monkeypatch, caplog):
    rows, probes, _ = _run(tmp_path, caplog=caplog)
    assert set(rows["version"]) == {1} and set(rows["metrics_version"]) == {1} and set(rows["run_index"]) == {0}
    assert set(probes["version"]) == {1} and set(probes["run_index"]) == {0}

    monkeypatch.setattr(ARMS["patch"], "version", 2)
    (view,) = sweep_jobs([f"paths.results={tmp_path}/raw", *JOB])  # what make status shows before the rerun
    assert view.state.summary() == "partial 0/2, stale rows of patch_r8 (older code version or force=true)"
    rows2, probes2, log = _run(tmp_path, caplog=caplog)
    assert "2 items selected, 2 with arms or probes to run" in log
    assert ("patch_r8: recomputing its stale records (stored at version 1 metrics_version 1, the code is at "
            "version 2 metrics_version 1)") in log
    assert len(rows2) == len(rows) == 4 and rows2.groupby(["item_id", "arm"]).size().eq(1).all()
    patch = _by_arm(rows2, "patch_r8")
    assert set(patch["version"]) == {2} and set(patch["run_index"]) == {1}
    pd.testing.assert_frame_equal(_by_arm(rows2, "blind"), _by_arm(rows, "blind"))  # untouched, timings and all
    pd.testing.assert_frame_equal(probes2, probes)
    assert "nothing to run" in _run(tmp_path, caplog=caplog)[2]


@pytest.mark.integration  # a few tiny jobs end to end: seconds each
def test_a_metrics_version_bump_recomputes_every_row_and_record(tmp_path, monkeypatch, caplog):
    _run(tmp_path, caplog=caplog)
    monkeypatch.setattr(job_spec, "METRICS_VERSION", 2)
    rows, probes, log = _run(tmp_path, caplog=caplog)
    assert set(rows["metrics_version"]) == set(probes["metrics_version"]) == {2}
    assert set(rows["run_index"]) == set(probes["run_index"]) == {1} and len(rows) == 4
    for label in ("blind", "patch_r8", "deficit_norms"):
        assert f"{label}: recomputing its stale records (stored at version 1 metrics_version 1" in log


@pytest.mark.integration  # a few tiny jobs end to end: seconds each
def test_force_recomputes_every_row_in_place(tmp_path, caplog):
    rows, probes, _ = _run(tmp_path, caplog=caplog)
    forced, forced_probes, log = _run(tmp_path, "force=true", caplog=caplog)
    assert "force=true, every row and record of its arms and probes is recomputed" in log
    assert "blind: recomputing its stale records (force=true)" in log
    assert len(forced) == len(rows) and set(forced["run_index"]) == {1} and set(forced_probes["run_index"]) == {1}
    assert len(forced_probes) == len(probes)
    assert "nothing to run" in _run(tmp_path, caplog=caplog)[2]  # force is one run's option, not the shard's


class Killed(BaseException):
    """kill -9 between two items."""


@pytest.mark.integration  # a few tiny jobs end to end: seconds each
def test_a_forced_run_killed_midway_is_continued_by_the_next_run(tmp_path, monkeypatch, caplog):
    _run(tmp_path, caplog=caplog)
    append, calls = Shard.append, []

    def dies_at_the_second_item(self, name, records, replace=()):
        if name == "rows":
            calls.append(1)
            if len(calls) == 2:
                raise Killed
        return append(self, name, records, replace)

    monkeypatch.setattr(Shard, "append", dies_at_the_second_item)
    with pytest.raises(Killed):
        runner.run(job_config(tmp_path, *JOB, "force=true"))
    monkeypatch.setattr(Shard, "append", append)
    (view,) = sweep_jobs([f"paths.results={tmp_path}/raw", *JOB])
    assert view.state.status == "partial" and view.state.k == 1  # the item not recomputed yet is stale
    rows, _, log = _run(tmp_path, caplog=caplog)  # no force: it continues the forced recompute
    assert "2 items selected, 1 with arms or probes to run" in log
    assert len(rows) == 4 and rows.groupby(["item_id", "arm"]).size().eq(1).all()
    assert sorted(rows.groupby("item_id")["run_index"].first()) == [1, 2]  # no row of the run before the force


def test_a_shard_written_before_versions_existed_reads_as_version_1(tmp_path, caplog):
    rows, _, _ = _run(tmp_path, caplog=caplog)
    (path,) = (tmp_path / "raw" / "adhoc").glob("*[0-9a-f].parquet")
    rows.drop(columns=["version", "metrics_version", "run_index"]).to_parquet(path)
    assert "nothing to run" in _run(tmp_path, caplog=caplog)[2]
    (view,) = sweep_jobs([f"paths.results={tmp_path}/raw", *JOB])
    assert view.state.complete and len(view.rows()) == 4


def test_a_shard_missing_a_column_this_code_writes_is_named(tmp_path, caplog):
    rows, _, _ = _run(tmp_path, caplog=caplog)
    (path,) = (tmp_path / "raw" / "adhoc").glob("*[0-9a-f].parquet")
    rows.drop(columns=["effective_rotary_rank"]).to_parquet(path)
    (view,) = sweep_jobs([f"paths.results={tmp_path}/raw", *JOB])
    said = re.escape(f"{path} lacks the column(s) effective_rotary_rank this code writes (rows of older code): rerun "
                     "its job with force=true")
    with pytest.raises(RuntimeError, match=said):
        view.rows()
    with pytest.raises(job_spec.JobError, match=said):  # issue 29 item 10: the run said "nothing to run"
        runner.run(job_config(tmp_path, *JOB))
    rows, _, _ = _run(tmp_path, "force=true", caplog=caplog)
    assert "effective_rotary_rank" in rows and len(rows) == 4


def test_rows_of_newer_code_are_not_called_older(tmp_path, monkeypatch, caplog):
    """Issue 29 item 10: rows written by a newer checkout (version 2) read back by an older one (version 1) were
    "stale ... (older code version)"."""
    monkeypatch.setattr(ARMS["patch"], "version", 2)
    _run(tmp_path, caplog=caplog)
    monkeypatch.undo()
    (view,) = sweep_jobs([f"paths.results={tmp_path}/raw", *JOB])
    assert view.state.summary() == ("partial 0/2, rows of patch_r8 from newer code (recomputed at this checkout's "
                                    "version, or update the checkout)"), view.state.summary()
    log = _run(tmp_path, caplog=caplog)[2]
    assert ("patch_r8: recomputing its records of newer code (stored at version 2 metrics_version 1, this "
            "checkout is at version 1 metrics_version 1)") in log, log


@pytest.mark.integration  # a few tiny jobs end to end: seconds each
def test_a_render_refuses_one_arms_rows_of_two_versions_in_one_cell(tmp_path, monkeypatch, capsys):
    """The issue's case: a job of the cell ran with the old code, another with the new; the render names the arm,
    both versions and the shards instead of drawing them together (unless told)."""
    old = runner.run(job_config(tmp_path, *TINY3, "n_items=1"))
    monkeypatch.setattr(ARMS["blind"], "version", 2)
    new = runner.run(job_config(tmp_path, *TINY3, "n_items=2"))
    sweep = [*TINY3, "n_items=1,2", f"paths.results={tmp_path}/raw", "--out", str(tmp_path / "t3")]
    with pytest.raises(SystemExit, match=r"1 of 2 job\(s\) incomplete"):  # the old job is stale: not complete
        table3.main(sweep)
    with pytest.raises(SystemExit) as err:
        table3.main([*sweep, "--allow-partial"])
    msg = str(err.value)
    assert "rows of one arm in one cell come from different code versions" in msg
    assert (f"\n- blind (tiny_llava · synthetic): version 1 metrics_version 1 in {old}; version 2 metrics_version 1 "
            f"in {new}") in msg, msg
    assert "reprefill" not in msg and not (tmp_path / "t3.md").exists()
    table3.main([*sweep, "--allow-partial", "--allow-mixed-versions"])
    assert (tmp_path / "t3.md").exists()
    capsys.readouterr()


def test_a_source_change_at_the_same_version_is_a_warning_naming_the_plugin_and_the_fix(tmp_path, monkeypatch, caplog):
    """Issue 29 item 4: a researcher who edits an arm without a version bump and reruns got the old rows silently. Each
    record carries its plugin's ``source_digest``; a stored one at the current version that is not the working
    tree's is a warning naming the plugin, its class's file and the fix, also when the job has nothing to run."""
    rows, probes, _ = _run(tmp_path, caplog=caplog)
    blind = job_spec.build_specs("arm", ["blind"])[0]
    assert set(rows.loc[rows["arm"] == "blind", "source_digest"]) == {blind.source}
    assert set(probes["source_digest"]) == {job_spec.build_specs("probe", ["deficit_norms"])[0].source}
    real = job_spec.source_digest
    monkeypatch.setattr(job_spec, "source_digest", lambda cls: "0edited0" if cls is ARMS["patch"] else real(cls))
    _, _, log = _run(tmp_path, caplog=caplog)
    assert "nothing to run" in log
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "patch_r8" in line and "kamera/arms/patch.py" in line and "bump" in line and "version = 2" in line, line
    assert "blind" not in line and "deficit_norms" not in line


def test_the_source_digest_covers_the_plugins_own_files_not_the_kinds_base():
    digest = {name: job_spec.source_digest(cls) for name, cls in ARMS.items()}
    assert all(re.fullmatch(r"[0-9a-f]{12}", d) for d in digest.values())
    assert digest["blind"] != digest["patch"]  # their own modules
    assert job_spec.source_digest(ARMS["blind"]) == digest["blind"]  # stable
