"""Tracking: wandb is optional, imported lazily, one run per job attempt grouped by the job key."""

from __future__ import annotations

import logging
import sys
import types

import pandas as pd
import pytest

from kamera.run.track import Tracker


class FakeRun:
    def __init__(self, **kwargs):
        self.kwargs, self.logged, self.finished = kwargs, [], False

    def log(self, data, step=None):
        self.logged.append((data, step))

    def finish(self):
        self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
    mod = types.ModuleType("wandb")
    mod.runs = []

    def init(**kwargs):
        mod.runs.append(FakeRun(**kwargs))
        return mod.runs[-1]

    mod.init = init
    mod.Table = lambda dataframe: ("table", len(dataframe))
    mod.Image = lambda path: ("image", path)
    mod.Html = lambda html: ("html", len(html))
    monkeypatch.setitem(sys.modules, "wandb", mod)
    return mod


def test_disabled_tracking_never_imports_wandb(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "wandb", None)  # any import would raise
    t = Tracker.start("disabled", "kamera", "g", "abc", {}, tmp_path)
    t.log({"x": 1.0})
    t.finish()
    assert t.run is None


def test_missing_wandb_warns_and_runs_untracked(monkeypatch, tmp_path, caplog):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with caplog.at_level(logging.WARNING, logger="kamera.run.track"):
        t = Tracker.start("offline", "kamera", "g", "abc", {}, tmp_path)
    assert t.run is None and "not installed" in caplog.text


def test_one_run_per_job_attempt_grouped_by_the_job_key(fake_wandb, tmp_path):
    """No run id is reused (offline wandb ignores resume and runs sharing an id do not merge on sync):
    a second attempt of the same job is a second run in the same group."""
    for _ in range(2):
        t = Tracker.start("offline", "kamera", "table3", "0123abcd", {"model": {"name": "m"}}, tmp_path / "w")
        t.log({"patch_r16/kl": 0.1}, step=3)
        t.log_table("rows", pd.DataFrame({"a": [1, 2]}))
        png = tmp_path / "fig.png"
        png.write_bytes(b"png")
        t.log_files([png])
        t.finish()
    first, second = fake_wandb.runs
    assert first is not second and first.kwargs == second.kwargs
    assert "id" not in first.kwargs and "resume" not in first.kwargs
    assert first.kwargs["group"] == "0123abcd" and first.kwargs["job_type"] == "table3"
    assert first.kwargs["mode"] == "offline" and first.kwargs["config"]["model"]["name"] == "m"
    assert first.logged[0] == ({"patch_r16/kl": 0.1}, 3) and first.logged[1][0]["rows"] == ("table", 2)
    assert first.logged[2][0]["fig"] == ("image", str(png)) and first.finished
    with pytest.raises(ValueError, match=r"tracking\.mode"):
        Tracker.start("sometimes", "kamera", "g", "abc", {}, tmp_path)


def test_a_bad_kamera_tracking_stops_a_render_before_it_reads_rows(monkeypatch, capsys):
    """The renderers' --tracking default comes from $KAMERA_TRACKING: a typo there is refused at once (not after
    the table is drawn); an empty value means unset."""
    from experiments.common import parse

    monkeypatch.setenv("KAMERA_TRACKING", "offlin")
    with pytest.raises(SystemExit) as stop:
        parse("x", "table3_tiny", [])
    assert (
        stop.value.code == 2
        and "KAMERA_TRACKING must be one of disabled, offline, online, got 'offlin'" in capsys.readouterr().err
    )
    monkeypatch.setenv("KAMERA_TRACKING", "")
    assert parse("x", "table3_tiny", []).tracking == "disabled"
