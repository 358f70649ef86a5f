"""Arms and probes a model cannot serve are refused by name, before any item runs, never a mid-job traceback.

The layer driver (:mod:`kamera.reuse.recompute`: token and layer recompute, per-layer attention reads) builds a
full-attention row mask, so every plugin that ``drives_layers`` is refused on a model with sliding-window
(Gemma-3n) or recurrent (the Gated DeltaNet hybrid) layers; the hybrid also refuses the 4D-mask oracle (a mask
cannot keep A out of B's recurrent state). An arm's refusal is recorded in its job and the other arms run; a
probe's refusal stops the job with one line, before any item runs.
"""

from __future__ import annotations

import pytest
import torch
from pipeline_support import all_rows, job_config
from tinyfamilies import standard_spans

from kamera.arms import ARMS
from kamera.arms.unrotated import unrotated_kv
from kamera.job.store import Shard, shards
from kamera.probes import PROBES
from kamera.reuse.context import ReuseContext
from kamera.run import runner
from kamera.run.runner import JobError

LAYER_ARMS = sorted(n for n, cls in ARMS.items() if cls.drives_layers)
LAYER_PROBES = sorted(n for n, cls in PROBES.items() if cls.drives_layers)


def test_every_plugin_that_reaches_the_layer_driver_declares_it():
    """The arms and probes built on LayerDriver / PartialForward / recompute say so (the list is what refuses)."""
    assert {"cacheblend", "cross_mass", "epic", "first_k", "mpic", "nystrom", "oracle_topp", "quest",
            "shallow_reprefill", "sink", "vlcache"} <= set(LAYER_ARMS)
    assert {"injection_depth", "landmarks", "selector_recall"} <= set(LAYER_PROBES)
    assert not {"blind", "patch", "reprefill", "oracle4d", "orbit", "unrotated"} & set(LAYER_ARMS)


@pytest.mark.parametrize("name", ["tiny_gdn_hybrid", "tiny_gemma3n"])
def test_layer_driving_plugins_refuse_models_with_other_layer_types(tiny, name):
    adapter = tiny(name)
    for arm in LAYER_ARMS:
        why = ARMS[arm]().refuses(adapter)
        assert why and ("non-full-attention layers" in why or "text-only" in why), (arm, why)
    for probe in LAYER_PROBES:
        assert "non-full-attention layers" in PROBES[probe]().refuses(adapter), probe
    assert ARMS["blind"]().refuses(adapter) is None and ARMS["patch"]().refuses(adapter) is None


def test_the_oracle_and_shadowkv_refuse_where_they_are_not_defined(tiny):
    gdn, gemma = tiny("tiny_gdn_hybrid"), tiny("tiny_gemma3n")
    assert "4D mask cannot keep A out" in ARMS["oracle4d"]().refuses(gdn)
    assert ARMS["oracle4d"]().refuses(gemma) is None  # its sliding layers take the oracle's mask (test_gemma3n)
    assert "different frequencies" in ARMS["shadowkv"]().refuses(gemma)
    assert ARMS["shadowkv"]().refuses(gdn) is None
    assert ARMS["oracle4d"]().refuses(tiny("tiny_qwen2_5_vl")) is None
    assert ARMS["cacheblend"]().refuses(tiny("tiny_qwen2_5_vl")) is None


def test_unrotated_at_native_positions_is_blind_on_the_hybrid(tiny):
    """The unrotated chunk keeps the canonical state pages (they carry no position): with δ = 0 it is blind."""
    gdn = tiny("tiny_gdn_hybrid")
    ctx = ReuseContext(gdn, standard_spans(gdn, n_a=1), canonical_context="native")
    assert ctx.delta == 0
    kv = unrotated_kv(ctx)
    assert kv.state is ctx.canonical.state
    assert torch.equal(ctx.query(kv).logits, ctx.blind.logits)


def test_a_refused_arm_is_recorded_and_the_others_run(tmp_path):
    cfg = job_config(tmp_path, "model=tiny_gdn_hybrid", "bench=binding_words", "n_items=2",
                     "arms=[blind,cacheblend,oracle4d,patch_r8]")
    runner.run(cfg)
    rows = all_rows(tmp_path / "raw")
    assert sorted(rows.arm.unique()) == ["blind", "patch_r8"] and len(rows) == 4
    meta = next(iter(shards(tmp_path / "raw", "adhoc"))).meta()
    refused = {r["arm"]: r["reason"] for r in meta["refusals"]}
    assert set(refused) == {"cacheblend", "oracle4d"}
    assert "non-full-attention" in refused["cacheblend"] and "4D mask" in refused["oracle4d"]
    runner.run(cfg)  # complete: nothing recomputed, nothing duplicated
    assert len(all_rows(tmp_path / "raw")) == 4


def test_a_refused_probe_stops_the_job_before_any_item(tmp_path):
    cfg = job_config(tmp_path, "model=tiny_gdn_hybrid", "bench=binding_words", "n_items=1", "arms=[blind]",
                     "probes=[injection_depth]")
    with pytest.raises(JobError, match=r"probe injection_depth cannot run on tiny_gdn_hybrid: .*non-full-attention"):
        runner.run(cfg)
    assert all(Shard.rows(s).empty for s in shards(tmp_path / "raw", "adhoc"))
