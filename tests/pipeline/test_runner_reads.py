"""The runner reads a job's state once under its lock and keeps what it writes after that in step, not read back.

A second read of the state (after recording refused arms) or of the json (per item, for its recorded failure) would
be the same facts read again; these tests count the reads, and check that what the run keeps in step (the refused
arms dropped from the items' work, a failure a retry clears) is what the shard says.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
from pipeline_support import all_rows, job_config

from kamera.arms.shape import ArmItems
from kamera.errors import ItemError
from kamera.job.store import Shard, shards
from kamera.run import runner

TINY3 = ("experiment=table3_tiny", "testbed=tiny_llava", "arms=[reprefill,blind]")


@pytest.fixture
def reads(monkeypatch):
    """Each Shard.state call as 'locked' or 'free' (whether the shard's lock was held), and the runner's own
    Shard.meta calls by the function that made them."""
    seen: dict = {"state": [], "meta": Counter()}
    held = []
    real_state, real_meta, real_locked = Shard.state, Shard.meta, Shard.locked

    def state(self, *args, **kwargs):
        seen["state"].append("locked" if held else "free")
        return real_state(self, *args, **kwargs)

    def meta(self):
        caller = sys._getframe(1).f_code
        if Path(caller.co_filename) == Path(runner.__file__):
            seen["meta"][caller.co_name] += 1
        return real_meta(self)

    @contextmanager
    def locked(self, required=True):
        with real_locked(self, required) as mine:
            held.append(mine)
            try:
                yield mine
            finally:
                held.pop()

    monkeypatch.setattr(Shard, "state", state)
    monkeypatch.setattr(Shard, "meta", meta)
    monkeypatch.setattr(Shard, "locked", locked)
    return seen


def test_a_run_reads_the_state_once_under_its_lock_and_the_json_once_whatever_its_items(tmp_path, reads):
    """Refused arms are dropped from the items' work without reading the state again, and no item reads the json."""
    cfg = job_config(
        tmp_path, "model=tiny_gdn_hybrid", "bench=binding_words", "n_items=3", "arms=[blind,cacheblend,patch_r8]"
    )
    runner.run(cfg)
    assert reads["state"] == ["free", "locked", "free"]  # before the lock (complete?), under it, the run's outcome
    assert reads["meta"] == {"_begin": 1, "_run_locked": 1}  # its run index; refusals, failures and config
    rows = all_rows(tmp_path / "raw")
    assert sorted(rows.arm.unique()) == ["blind", "patch_r8"] and len(rows) == 6
    assert [r["arm"] for r in next(iter(shards(tmp_path / "raw", "adhoc"))).meta()["refusals"]] == ["cacheblend"]
    reads["state"].clear()
    runner.run(cfg)  # complete: one read, no lock taken for the work
    assert reads["state"] == ["free"]


def test_a_failed_item_is_recorded_and_a_retry_that_succeeds_clears_it(tmp_path, monkeypatch):
    """The run keeps the json's failed items in step with what it writes: a retried item that succeeds leaves it."""
    real = ArmItems.evaluate_item
    failing: set[str] = set()

    def evaluate(self, served, item, *args):
        if not failing:
            failing.add(item.item_id)  # the first item evaluated fails, on the first run only
        if item.item_id in failing:
            raise ItemError(f"item {item.item_id}: cannot be encoded")
        return real(self, served, item, *args)

    monkeypatch.setattr(ArmItems, "evaluate_item", evaluate)
    cfg = job_config(tmp_path, *TINY3, "n_items=2")
    runner.run(cfg)
    (shard,) = shards(tmp_path / "raw", cfg.group)
    (bad,) = failing
    assert shard.meta()["failed"] == {bad: f"item {bad}: cannot be encoded"}
    assert bad not in set(shard.rows().item_id) and len(shard.rows()) == 2
    monkeypatch.setattr(ArmItems, "evaluate_item", real)
    runner.run(cfg)  # a failure is final without retry_failed
    assert shard.meta()["failed"] == {bad: f"item {bad}: cannot be encoded"} and len(shard.rows()) == 2
    runner.run(job_config(tmp_path, *TINY3, "n_items=2", "retry_failed=true"))
    assert shard.meta()["failed"] == {} and len(shard.rows()) == 4
