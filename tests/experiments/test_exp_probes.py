"""The Fig. 6 probes: exact identities on tiny families (GQA, deepstack GQA, MLA), and bad knobs.

injection_depth: injecting nothing (at layer 0) is the 4D-mask oracle's B, injecting at the last layer
is KV(B|A) itself, and the replay it builds KV(B|A) from reproduces the full prefill. deficit_heads: the
cells' energies add up to ‖Δ‖² of every layer and channel.
"""

from __future__ import annotations

import pytest
import torch
from tinyfamilies import standard_spans

from kamera.probes import make_probe
from kamera.probes.injection_depth import conditioned_hidden
from kamera.reuse.context import ReuseContext

FAMILIES = ["tiny_qwen2_5_vl", "tiny_qwen3_vl", "tiny_kimi"]


def energy(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> float:
    return float(sum((x.double() - y.double()).pow(2).sum() for x, y in zip(a, b, strict=True)))


@pytest.mark.parametrize("name", FAMILIES)
def test_injection_depth_runs_from_the_oracle_to_the_conditioned_kv(tiny, name):
    adapter = tiny(name)
    ctx = ReuseContext(adapter, standard_spans(adapter))
    records = make_probe("injection_depth").run(ctx)
    last = adapter.n_layers - 1
    assert [r["layer"] for r in records] == list(range(adapter.n_layers))
    assert records[0]["explained"] == 0.0 and records[last]["explained"] == pytest.approx(1.0, abs=1e-12)
    assert all(r["depth"] == r["layer"] / adapter.n_layers for r in records)
    # the replay reproduces the full prefill's KV(B|A) …
    _, target = conditioned_hidden(ctx)
    conditioned = ctx.conditioned.layers[last]
    assert energy(target, conditioned) <= 1e-10 * energy(conditioned, tuple(torch.zeros_like(t) for t in conditioned))
    # … and the deficit it explains (nothing injected) is KV(B|A) − the oracle's B, conditioning removed at B's
    # own positions: a different code path (one masked forward) gives the same energy
    oracle = ctx.oracle_b.layers[last]
    assert records[0]["deficit"] == pytest.approx(energy(conditioned, oracle), rel=1e-4)
    assert records[0]["deficit"] > 0


def test_injection_depth_measures_only_the_layers_asked(tiny):
    adapter = tiny("tiny_qwen2_5_vl")
    ctx = ReuseContext(adapter, standard_spans(adapter))
    every = {r["layer"]: r["explained"] for r in make_probe("injection_depth").run(ctx)}
    some = make_probe("injection_depth", layers=[2, 1]).run(ctx)
    assert [r["layer"] for r in some] == [1, 2] and all(r["explained"] == every[r["layer"]] for r in some)
    with pytest.raises(ValueError, match="out of range"):
        make_probe("injection_depth", layers=[adapter.n_layers]).run(ctx)


@pytest.mark.parametrize("layers", ["deep", [], [-1], [True], [1.5]])
def test_injection_depth_refuses_bad_layers(layers):
    with pytest.raises(ValueError, match="injection_depth layers"):
        make_probe("injection_depth", layers=layers)


@pytest.mark.parametrize("name", ["tiny_qwen2_5_vl", "tiny_kimi"])
def test_deficit_heads_add_up_to_the_deficit(tiny, name):
    adapter = tiny(name)
    ctx = ReuseContext(adapter, standard_spans(adapter))
    records = make_probe("deficit_heads").run(ctx)
    for layer, chans in enumerate(ctx.deficit.layers):
        for spec, d in zip(ctx.deficit.specs, chans, strict=True):
            cells = [r["energy"] for r in records if r["layer"] == layer and r["channel"] == spec.name]
            assert len(cells) == spec.heads  # MLA: one cell per layer and channel (no KV heads)
            assert sum(cells) == pytest.approx(float(d.double().pow(2).sum()), rel=1e-9, abs=1e-12)
