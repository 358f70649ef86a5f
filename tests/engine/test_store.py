"""The engine path without an engine: the chunk store, the splice plan, the ULP unit and the family preflight."""

from __future__ import annotations

import pytest
import torch
import transformers as tf

from kamera.core import ChunkKV, Patch, deficit, relocate
from kamera.engine.family import EngineError, channels, preflight
from kamera.engine.store import StoreError, load_page, load_patch, model_id, save_page, save_patch
from kamera.metrics import bf16_ulps
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


def test_the_weights_digest_reads_each_file_once_and_follows_a_rewrite(tmp_path, monkeypatch):
    """An engine start only stats a checkpoint it has hashed; a weight file rewritten in place is other weights."""
    import kamera.data.media as media

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights-a")
    reads = []
    monkeypatch.setattr(media, "sha256_file", lambda p, _read=media.sha256_file: reads.append(p) or _read(p))
    first = model_id(tmp_path, "float32")
    assert len(reads) == 2 and model_id(tmp_path, "float32") == first and len(reads) == 2
    (tmp_path / "model.safetensors").write_bytes(b"weights-b")
    assert model_id(tmp_path, "float32") != first and len(reads) == 3


@pytest.mark.parametrize("name", ["model.pth", "flax_model.msgpack", "tf_model.h5", "model.gguf"])
def test_the_engine_digest_reads_every_weight_file_a_jobs_fingerprint_reads(tmp_path, name):
    """One list of weight suffixes (kamera.data.media.WEIGHT_SUFFIXES) for a job's fingerprint and the engine's
    digest: another weight file of any of them is other weights; a README is not."""
    (tmp_path / "config.json").write_text("{}")
    first = model_id(tmp_path, "float32")
    (tmp_path / "README.md").write_text("notes")
    assert model_id(tmp_path, "float32") == first
    (tmp_path / name).write_bytes(b"weights")
    assert model_id(tmp_path, "float32") != first


def test_the_connector_reads_the_models_own_rotary_frequencies():
    (k, v) = SPECS
    assert k.rotary is not None and v.rotary is None and (k.heads, k.dim) == (2, 64)
    expected = 1.0 / 1e6 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    assert torch.allclose(k.rotary.inv_freq.double(), expected, rtol=1e-7)


def test_mla_pages_are_the_latent_and_k_pe_with_k_pe_rotated_on_interleaved_pairs(tmp_path):
    specs = channels(tiny.deepseek_v2_engine_config())
    (c_kv, k_pe) = specs
    assert (c_kv.name, c_kv.heads, c_kv.dim, c_kv.rotary) == ("c_kv", 1, 512, None)
    assert (k_pe.name, k_pe.heads, k_pe.dim, k_pe.rotary.layout) == ("k_pe", 1, 64, "interleaved")
    expected = 1.0 / 1e4 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    assert torch.allclose(k_pe.rotary.inv_freq.double(), expected, rtol=1e-7)
    g = torch.Generator().manual_seed(0)
    kv = ChunkKV(specs, [tuple(torch.randn(6, s.heads, s.dim, generator=g) for s in specs)], torch.arange(6))
    save_page(tmp_path, "mla", kv, torch.arange(6), MODEL)
    got, _ = load_page(tmp_path, "mla", MODEL, specs)
    assert all(torch.equal(x, y) for x, y in zip(got.layers[0], kv.layers[0], strict=True))
    with pytest.raises(StoreError, match=r"has channels \['c_kv', 'k_pe'\], the engine's are \['k', 'v'\]"):
        load_page(tmp_path, "mla", MODEL, SPECS)


@pytest.mark.parametrize(
    "config, why",
    [
        (tf.DeepseekV3Config(**tiny.MLA_TEXT), "is MLA but not DeepSeek-V2"),
        (tf.DeepseekV2Config(**tiny.MLA_TEXT), "caches a latent row of 160 .* vLLM's MLA takes 320, 512, 576 only"),
        (tiny.qwen3_omni_config(), "Qwen3-Omni thinker's audio tokens"),
        (tiny.kimi_config(), "Kimi-K2.5 .* not wired"),
        (
            tf.Qwen2Config(
                **tiny.TEXT, rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [8, 12, 12]}
            ),
            "has M-RoPE sections",
        ),
        (
            tf.Qwen2Config(**tiny.TEXT, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
            "RoPE 'linear'",
        ),
    ],
)
def test_families_the_connector_cannot_splice_are_a_preflight_error(config, why):
    with pytest.raises(EngineError, match=why):
        preflight(config)


def test_bf16_ulps_count_in_the_references_bf16_spacing():
    ref = torch.tensor([1.0, 1.0, -3.0, 0.0])
    got = torch.tensor([1.0, 1.0 + 2**-7, -3.0 - 2 * 2**-6, 0.0])
    assert bf16_ulps(got, ref).tolist() == [0.0, 1.0, 2.0, 0.0]


def test_the_papers_fig12_backbones_are_served_or_refused_by_name_before_any_checkpoint_loads():
    from kamera.engine.family import preflight_model

    with pytest.raises(EngineError, match=r"kimi_vl_a3b \(kimi_vl\) is not served .*KimiVLProcessor\) is remote code"):
        preflight_model("kimi_vl_a3b")
    with pytest.raises(EngineError, match=r"qwen3_omni_30b_a3b .* audio tokens take TMRoPE"):
        preflight_model("qwen3_omni_30b_a3b")
    for served in ("tiny_deepseek_v2", "qwen2_5_vl_7b", "qwen3_vl_8b"):  # MLA page; sectioned / interleaved M-RoPE
        preflight_model(served)


@pytest.mark.parametrize("config", [tiny.qwen25_config(), tiny.qwen3_config()], ids=["sectioned", "interleaved"])
def test_m_rope_pages_are_k_v_in_rotate_half_pairs_over_the_whole_head(config):
    (k, v) = channels(config)
    assert (k.heads, k.dim, k.rotary.layout, k.rotary.rotary_dim, v.rotary) == (2, 64, "half", 64, None)


def test_a_segment_must_move_rigidly_on_all_three_rows():
    from kamera.engine.plan import Segment, segment_delta

    page_pos = torch.stack([torch.arange(10)] * 3)
    page_pos[1:, 3:7] += torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1]])  # a 2 x 2 image at tokens 3..6
    prompt_pos = torch.cat([torch.zeros(3, 4, dtype=torch.long), page_pos + 9], dim=1)
    assert segment_delta(Segment("p", 0, 10, 4), page_pos, prompt_pos) == 9
    bent = prompt_pos.clone()
    bent[2, 8] += 1
    with pytest.raises(EngineError, match="does not move rigidly"):
        segment_delta(Segment("p", 0, 10, 4), page_pos, bent)
    with pytest.raises(EngineError, match="positions have shape"):
        segment_delta(Segment("p", 0, 10, 4), page_pos[0], prompt_pos)


def test_media_windows_name_the_full_digest_and_the_offset_inside_the_image():
    from types import SimpleNamespace

    from kamera.engine.plan import media_of, windows

    def feature(digest, offset, n):
        position = SimpleNamespace(offset=offset, length=n)
        return SimpleNamespace(modality="image", identifier=digest, mm_position=position)

    media = media_of([feature("b" * 64, 20, 16), feature("a" * 64, 4, 12)])
    assert [m["offset"] for m in media] == [4, 20]
    assert windows(media, 10, 24) == [("image", "a" * 64, 0, 6, 6), ("image", "b" * 64, 10, 0, 4)]
    assert windows(media, 0, 4) == []
    with pytest.raises(EngineError, match="too short"):
        media_of([feature("renderer0-mm-1-image-0"[:8], 0, 4)])


def test_a_non_contiguous_embedding_run_is_part_of_the_media_identity():
    """vLLM's ``PlaceholderRange.is_embed``: the runs of a placeholder that take embeddings are recorded (only where
    some token does not), so a page is served only where the prompt's medium has the same runs at the same place."""
    from types import SimpleNamespace

    from kamera.engine.plan import media_of, windows

    def feature(mask):
        is_embed = None if mask is None else torch.tensor(mask)
        position = SimpleNamespace(offset=10, length=5, is_embed=is_embed)
        return SimpleNamespace(modality="image", identifier="a" * 64, mm_position=position)

    runs = media_of([feature([False, True, True, False, True])])
    assert runs[0]["embeds"] == [[11, 13], [14, 15]]
    assert windows(runs, 12, 20) == [("image", "a" * 64, 0, 2, 3, ((0, 1), (2, 3)))]
    plain, full = media_of([feature(None)]), media_of([feature([True] * 5)])
    assert plain == full and "embeds" not in plain[0]
    other = media_of([feature([True, True, False, False, True])])
    assert windows(other, 0, 20) != windows(runs, 0, 20) != windows(plain, 0, 20)


def test_the_engine_preflight_refuses_in_one_line_and_never_says_ok_without_vllm(tmp_path, monkeypatch, capsys):
    import importlib.util

    from kamera.engine.family import main

    omni = tmp_path / "omni"
    tiny.qwen3_omni_config().save_pretrained(omni)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a))
    assert main([str(omni), "kimi_vl_a3b", "qwen2_5_vl_7b"]) == 1
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "engine preflight:" and len(said) == 3 and "Traceback" not in "".join(said)
    assert "model_type 'qwen3_omni_moe_thinker' is not served by the engine connector" in said[1]
    assert said[2].startswith("- kimi_vl_a3b: kimi_vl_a3b (kimi_vl) is not served")
    assert main(["qwen2_5_vl_7b", "qwen3_vl_8b"]) == 0
    assert capsys.readouterr().out.startswith("the engine connector serves qwen2_5_vl_7b, qwen3_vl_8b")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    assert main(["qwen2_5_vl_7b"]) == 2 and "vLLM is not installed in this env" in capsys.readouterr().out


def test_bf16_ulps_of_a_rotary_pair_are_counted_at_the_pairs_larger_element():
    from kamera.core import RotarySpec
    from kamera.engine.verify import pair_scale, pair_ulps

    x = torch.tensor([[1.0, -8.0, 2.0, 0.5, 7.0]])  # rotary over 4 dims, the fifth passes through
    assert pair_scale(x, RotarySpec("half", torch.ones(2), 4)).tolist() == [[2.0, 8.0, 2.0, 8.0, 7.0]]
    assert pair_scale(x, RotarySpec("interleaved", torch.ones(2), 4)).tolist() == [[8.0, 8.0, 2.0, 2.0, 7.0]]
    assert pair_scale(x, None).tolist() == [[1.0, 8.0, 2.0, 0.5, 7.0]]
    got = x + torch.tensor([[0.0, 0.0, 0.0, 2**-4, 0.0]])  # one ULP of 8 (the pair's larger element), 16 of 0.5
    assert pair_ulps(got, x, RotarySpec("half", torch.ones(2), 4)).max() == 1.0
    assert pair_ulps(got, x, None).max() == 16.0


def test_listed_chunks_are_found_in_the_prompt_wherever_they_sit_and_tile_it_from_zero(tmp_path):
    """A position-free request lists pages; each is placed where its tokens now are (δ from the place found), in
    whatever order the prompt holds them, and composing them is each page relocated by its own δ."""
    from kamera.engine.plan import PARAMS, compose, matched_chunks, plan_segments

    a, b = torch.arange(100, 110), torch.arange(200, 216)
    save_page(tmp_path, "a", page(10, 0), a, MODEL)
    save_page(tmp_path, "b", page(16, 1, start=40), b, MODEL)  # B was captured at position 40
    prompt = torch.cat([b, a, torch.tensor([7, 8])])  # B first now, then A, then the query
    segs = matched_chunks(["a", {"key": "b", "rank": 4, "patch": "pb"}], prompt, tmp_path, MODEL, SPECS)
    assert [(s.key, s.a, s.b, s.start, s.patch, s.rank) for s in segs] == [("b", 0, 16, 0, "pb", 4),
                                                                           ("a", 0, 10, 16, None, None)]
    segs = matched_chunks(["a", "b"], prompt, tmp_path, MODEL, SPECS)
    kv = compose(segs, tmp_path, MODEL, SPECS)
    want = relocate(page(16, 1, start=40), -40).layers[1][0], relocate(page(10, 0), 16).layers[1][0]
    assert torch.equal(kv.positions, torch.arange(26)) and torch.equal(kv.layers[1][0], torch.cat(want))
    # the tiling stops where no listed page matches, and never claims the whole prompt
    assert [s.key for s in matched_chunks(["a"], prompt, tmp_path, MODEL, SPECS)] == []
    assert [s.key for s in matched_chunks(["b", "a"], torch.cat([b, a]), tmp_path, MODEL, SPECS)] == ["b"]
    with pytest.raises(StoreError, match="not in the store"):
        matched_chunks(["a", "zz"], prompt, tmp_path, MODEL, SPECS)
    with pytest.raises(EngineError, match="chunk 0 must be a page key"):
        matched_chunks([{"key": "a", "start": 3}], prompt, tmp_path, MODEL, SPECS)
    with pytest.raises(EngineError, match="segments or chunks, not both"):
        plan_segments({PARAMS: {"chunks": ["a"], "segments": [{"key": "a", "span": [0, 1]}]}}, prompt, tmp_path,
                      MODEL, SPECS)
