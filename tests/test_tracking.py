"""Tracking: wandb is optional, imported lazily, one resumable run per job keyed by its config hash."""

from __future__ import annotations

import logging
import sys
import types

import pandas as pd
import pytest

from kamera.track import Tracker


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
    with caplog.at_level(logging.WARNING, logger="kamera.track"):
        t = Tracker.start("offline", "kamera", "g", "abc", {}, tmp_path)
    assert t.run is None and "not installed" in caplog.text


def test_one_resumable_run_per_config_hash(fake_wandb, tmp_path):
    t = Tracker.start("offline", "kamera", "table3", "0123abcd", {"model": {"name": "m"}}, tmp_path / "w")
    t.log({"patch_r16/kl": 0.1}, step=3)
    t.log_table("rows", pd.DataFrame({"a": [1, 2]}))
    png = tmp_path / "fig.png"
    png.write_bytes(b"png")
    t.log_files([png])
    t.finish()
    run = fake_wandb.runs[0]
    assert run.kwargs["id"] == "cfg-0123abcd" and run.kwargs["resume"] == "allow"
    assert run.kwargs["group"] == "table3" and run.kwargs["mode"] == "offline" and run.kwargs["config"]["model"]["name"] == "m"
    assert run.logged[0] == ({"patch_r16/kl": 0.1}, 3) and run.logged[1][0]["rows"] == ("table", 2)
    assert run.logged[2][0]["fig"] == ("image", str(png)) and run.finished
    with pytest.raises(ValueError, match=r"tracking\.mode"):
        Tracker.start("sometimes", "kamera", "g", "abc", {}, tmp_path)
