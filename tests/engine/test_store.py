"""The engine path without an engine: the chunk store, the splice plan, the ULP unit and the family preflight."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from kamera.core import ChunkKV, Patch, deficit, relocate
from kamera.engine.family import EngineError, channels, preflight
from kamera.engine.fig12 import bf16_ulps
from kamera.engine.store import StoreError, load_page, load_patch, model_id, save_page, save_patch
from kamera.models import tiny

SPECS = channels(tf.Qwen2Config(**tiny.TEXT, rope_parameters={"rope_type": "default", "rope_theta": 1e6}))
MODEL = model_id("/ckpt/tiny", "float32")


def page(n: int, seed: int, start: int = 0) -> ChunkKV:
    g = torch.Generator().manual_seed(seed)
    layers = [tuple(torch.randn(n, s.heads, s.dim, generator=g) for s in SPECS) for _ in range(2)]
    return ChunkKV(SPECS, layers, torch.arange(start, start + n))


def test_pages_and_patches_round_trip_and_stay_with_their_model(tmp_path):
    kv, ids = page(12, 0), torch.arange(100, 112)
    save_page(tmp_path, "b", kv, ids, MODEL)
    got, got_ids = load_page(tmp_path, "b", MODEL, SPECS)
    assert torch.equal(got_ids, ids) and torch.equal(got.positions, kv.positions)
    assert all(torch.equal(x, y) for a, b in zip(got.layers, kv.layers, strict=True) for x, y in zip(a, b, strict=True))
    patch = Patch.form(deficit(page(12, 1, 5), relocate(kv, 5)))
    save_patch(tmp_path, "p", patch, MODEL)
    back = load_patch(tmp_path, "p", MODEL, SPECS)
    assert torch.equal(back.apply(kv, 5).layers[1][0], patch.apply(kv, 5).layers[1][0])
    with pytest.raises(StoreError, match="belongs to model"):
        load_page(tmp_path, "b", model_id("/ckpt/other", "float32"), SPECS)
    with pytest.raises(StoreError, match="is a page, not a patch"):
        load_patch(tmp_path, "b", MODEL, SPECS)
    with pytest.raises(StoreError, match="not in the store"):
        load_page(tmp_path, "absent", MODEL, SPECS)
    with pytest.raises(StoreError, match="store key"):
        save_page(tmp_path, "../escape", kv, ids, MODEL)


def test_the_connector_reads_the_models_own_rotary_frequencies():
    (k, v) = SPECS
    assert k.rotary is not None and v.rotary is None and (k.heads, k.dim) == (2, 64)
    expected = 1.0 / 1e6 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    assert torch.allclose(k.rotary.inv_freq.double(), expected, rtol=1e-7)


def test_mla_pages_are_the_latent_and_k_pe_with_k_pe_rotated_on_interleaved_pairs(tmp_path):
    specs = channels(tf.DeepseekV2Config(**tiny.MLA_TEXT))
    (c_kv, k_pe) = specs
    assert (c_kv.name, c_kv.heads, c_kv.dim, c_kv.rotary) == ("c_kv", 1, 128, None)
    assert (k_pe.name, k_pe.heads, k_pe.dim, k_pe.rotary.layout) == ("k_pe", 1, 32, "interleaved")
    expected = 1.0 / 1e4 ** (torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    assert torch.allclose(k_pe.rotary.inv_freq.double(), expected, rtol=1e-7)
    g = torch.Generator().manual_seed(0)
    kv = ChunkKV(specs, [tuple(torch.randn(6, s.heads, s.dim, generator=g) for s in specs)], torch.arange(6))
    save_page(tmp_path, "mla", kv, torch.arange(6), MODEL)
    got, _ = load_page(tmp_path, "mla", MODEL, specs)
    assert all(torch.equal(x, y) for x, y in zip(got.layers[0], kv.layers[0], strict=True))
    with pytest.raises(StoreError, match=r"has channels \['c_kv', 'k_pe'\], the engine's are \['k', 'v'\]"):
        load_page(tmp_path, "mla", MODEL, SPECS)


@pytest.mark.parametrize("config, why", [
    (tf.DeepseekV3Config(**tiny.MLA_TEXT), "is MLA but not DeepSeek-V2"),
    (tiny.qwen25_config(), "not served by the engine connector"),
    (tf.Qwen2Config(**tiny.TEXT, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}), "RoPE 'linear'"),
])
def test_families_the_connector_cannot_splice_are_a_preflight_error(config, why):
    with pytest.raises(EngineError, match=why):
        preflight(config)


def test_bf16_ulps_count_in_the_references_bf16_spacing():
    ref = torch.tensor([1.0, 1.0, -3.0, 0.0])
    got = torch.tensor([1.0, 1.0 + 2**-7, -3.0 - 2 * 2**-6, 0.0])
    assert bf16_ulps(got, ref).tolist() == [0.0, 1.0, 2.0, 0.0]


def test_the_papers_fig12_backbones_are_refused_by_name_before_any_checkpoint_loads():
    from kamera.engine.family import preflight_model

    with pytest.raises(EngineError, match=r"kimi_vl_a3b .* is MLA but not DeepSeek-V2"):
        preflight_model("kimi_vl_a3b")
    preflight_model("tiny_deepseek_v2")  # served: the MLA page of DeepSeek-V2
    with pytest.raises(EngineError, match=r"qwen2_5_vl_7b .* M-RoPE"):
        preflight_model("qwen2_5_vl_7b")
