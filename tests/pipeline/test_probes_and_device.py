"""Probes stored beside the rows, and the device defaults (issue 9 failure 9: ``device: cpu`` and
``threads: 1`` were the defaults on a GPU node)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from pipeline_support import job_config
from tinyfamilies import standard_spans

from kamera.job import threads_for
from kamera.job.store import shards
from kamera.models import load_model
from kamera.models.loading import resolve_device
from kamera.probes import make_probe
from kamera.reuse.context import ReuseContext
from kamera.reuse.plugin import SHARED, Registry
from kamera.run import runner
from kamera.sweep import compose_config


def test_deficit_norms_are_the_deficits_norms_and_vanish_at_layer_zero(tiny):
    """Layer 0's K/V depend on the token and its position only, so KV(B|A) there is R(δ)·KV(B|∅) up to
    rounding; deeper layers carry the context."""
    adapter = tiny("tiny_qwen2_5_vl")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    records = make_probe("deficit_norms").run(ctx)
    assert [(r["layer"], r["channel"]) for r in records] == [(l, c) for l in range(4) for c in ("k", "v")]
    frob = ctx.deficit.frobenius()
    for r in records:
        c = "kv".index(r["channel"])
        assert r["delta_norm"] == pytest.approx(frob[r["layer"]][c], rel=1e-6)
        assert r["conditioned_norm"] == pytest.approx(float(ctx.conditioned.layers[r["layer"]][c].norm()), rel=1e-6)
        assert r["ratio"] == pytest.approx(r["delta_norm"] / r["conditioned_norm"])
    assert max(r["ratio"] for r in records if r["layer"] == 0) < 1e-5
    assert min(r["ratio"] for r in records if r["layer"] > 0) > 1e-3


def test_probe_records_are_stored_keyed_like_rows_and_resume(tmp_path, monkeypatch):
    """Adding a probe to a finished job runs only the forwards the probe needs (no query forward)."""
    loaded = []

    def load(*args, **kwargs):
        loaded.append(load_model(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(runner, "load_model", load)
    base = ("model=tiny_llava", "arms=[blind]", "n_items=2")
    runner.run(job_config(tmp_path, *base))
    runner.run(job_config(tmp_path, *base, "probes=[deficit_norms]"))
    assert loaded[1].forwards == Counter(full=2, solo=2)
    (shard,) = shards(tmp_path / "raw", "adhoc")
    probes = shard.probes()
    assert len(probes) == 2 * 4 * 2 and set(probes["probe"]) == {"deficit_norms"}
    assert probes.groupby(["item_id", "probe", "knobs", "layer", "channel"]).size().eq(1).all()
    assert set(probes["job_key"]) == {shard.key} and len(shard.rows()) == 2
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("a complete job loaded a model"))
    runner.run(job_config(tmp_path, *base, "probes=[deficit_norms]"))


def test_a_plugin_must_read_shared_quantities_only():
    from dataclasses import dataclass

    from kamera.probes import Probe

    @dataclass
    class TypoProbe(Probe):
        name = "typo"
        needs = frozenset({"patchh"})

    with pytest.raises(ValueError, match=r"needs lists \['patchh'\]"):
        Registry("probe").register(TypoProbe)
    assert all(hasattr(ReuseContext, q) for q in SHARED)


def test_device_auto_uses_cuda_when_visible_and_leaves_threads_to_torch_there():
    cfg = compose_config([])
    assert cfg.device == "auto" and cfg.threads == "auto"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert threads_for("auto", "cpu") == 1 and threads_for("auto", "cuda") is None and threads_for(None, "cpu") is None
    assert threads_for(4, "cuda:0") == 4
