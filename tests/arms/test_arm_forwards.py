"""Every arm runs (or refuses with a reason) on every tiny family, and no arm repeats a shared forward."""

from __future__ import annotations

import pytest
import torch
from tinyfamilies import TINY, standard_spans

from kamera.arms import ARMS, make_arm
from kamera.reuse.context import ReuseContext

SHARED = ("full", "solo", "blind", "oracle", "solo_hidden", "probe_cross", "probe_query", "conduit_probe")
# the arm set a table run would put on one item: defaults plus the variants that share per-item work
VARIANTS = [
    *[(name, {}) for name in sorted(ARMS)],
    ("patch", {"rank": 64, "layers": "deep_half"}),
    ("orbit", {"rank": 64}),
    ("first_k", {"k": 32}),
    ("first_k", {"match_rank": 16}),
    ("quest", {"match_rank": 16}),
    ("shadowkv", {"match_rank": 16}),
    ("oracle_topp", {"p": 0.25}),
    ("cross_mass", {"fraction": 0.5}),
    ("nystrom", {"k": 8}),
    ("cacheblend", {"filtering": "gradual"}),
    ("shallow_reprefill", {"rerun_fraction": 0.5}),
]
REFUSED = {("mpic", "tiny_deepseek_v2"), ("vlcache", "tiny_deepseek_v2"), ("conduit", "tiny_deepseek_v2"),
           ("mpic", "tiny_gemma3"), ("vlcache", "tiny_gemma3"), ("conduit", "tiny_gemma3"), ("shadowkv", "tiny_gemma3"),
           ("shadowkv", "tiny_kimi"), ("shadowkv", "tiny_deepseek_v2"),
           ("prcr", "tiny_deepseek_v2"), ("prcr", "tiny_gemma3")}  # interleaved k_pe; a base per layer type


@pytest.mark.parametrize("name", TINY)
def test_every_arm_runs_once_per_shared_forward(tiny, name):
    adapter = tiny(name)
    ctx = ReuseContext(adapter, standard_spans(adapter))
    adapter.forwards.clear()
    for _ in range(2):  # a second sweep over the same item adds arm forwards only
        for arm_name, knobs in VARIANTS:
            arm = make_arm(arm_name, **knobs)
            reason = arm.refuses(adapter)
            assert bool(reason) == ((arm_name, name) in REFUSED), (arm_name, reason)
            if reason:
                continue
            out = arm.run(ctx)
            assert torch.isfinite(out.out.logits).all()
            assert isinstance(out.bytes, int) and out.bytes >= 0
            assert isinstance(out.params, dict) and all(out.params[k] == v for k, v in arm.params().items())
        counts = dict(adapter.forwards)
        assert all(counts.get(tag, 0) <= 1 for tag in SHARED), counts
        assert counts.get("orbit_conditioned") == 1  # K = 2: one held-out ordering, shared by every rank
    assert adapter.lm.config._attn_implementation == "sdpa"
