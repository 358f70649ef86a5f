"""Shaped checkpoints have the real layout; a checkpoint that does not match fails naming what, before weights load."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from shaped_fixtures import SHARED_TOKENIZERS
from tinyfamilies import noise_image
from transformers import PreTrainedTokenizerFast

from kamera.job import preflight
from kamera.models import kimi_vl, load_model, phi3_v
from kamera.models.hub_checkpoint import INDEX, CheckpointMismatchError, HubCheckpoint
from kamera.models.shaped import shaped_writer
from kamera.models.shaped.writer import VERSION
from kamera.sweep import compose_config

NAMES = ["kimi_vl_a3b", "phi3_5_vision"]
LOAD = {"kimi_vl_a3b": kimi_vl.load_kimi_vl_a3b, "phi3_5_vision": phi3_v.load_phi3_5_vision}


def names_and_shapes(name: str, path: Path) -> list[tuple[str, tuple[int, ...]]]:
    hub = json.loads((path / "config.json").read_text())
    return kimi_vl.hub_tensor_shapes(hub) if name == "kimi_vl_a3b" else phi3_v.hub_tensor_shapes(hub, 2)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.shaped
@pytest.mark.full
def test_shaped_checkpoint_has_the_hub_layout(shaped, name):
    path = shaped(name)
    for f in ("config.json", "preprocessor_config.json", "generation_config.json", "tokenizer.json",
              "tokenizer_config.json", "chat_template.jinja", INDEX):
        assert (path / f).is_file(), f
    manifest = json.loads((path / "shaped.json").read_text())
    assert {k: manifest[k] for k in ("model", "layers", "vision_layers", "seed", "writer_version")} == {
        "model": name, "layers": 2, "vision_layers": 2, "seed": 0, "writer_version": VERSION}
    assert manifest["parameters"] == sum(math.prod(s) for _, s in names_and_shapes(name, path))
    ckpt = HubCheckpoint.open(path)
    assert ckpt.shapes == dict(names_and_shapes(name, path))
    assert len(set(ckpt.weight_map.values())) > 1  # sharded
    tok = PreTrainedTokenizerFast.from_pretrained(path)
    hub = json.loads((path / "config.json").read_text())
    if name == "kimi_vl_a3b":
        assert hub["text_config"] | {"num_hidden_layers": 27} == kimi_vl.HUB_CONFIG["text_config"]
        assert len(tok) == 163840 and all(tok.convert_tokens_to_ids(t) == i for t, i in kimi_vl.SPECIALS.items())
        rendered = tok.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}],
            tokenize=False,
            add_generation_prompt=True,
        )
        assert rendered == (
            "<|im_user|>user<|im_middle|><|media_start|>image<|media_content|><|media_pad|><|media_end|>"
            "Hi<|im_end|><|im_assistant|>assistant<|im_middle|>"
        )
    else:
        assert hub | {"num_hidden_layers": 32} == phi3_v.HUB_CONFIG
        assert tok.convert_tokens_to_ids("<|image|>") == 32044
        assert all(tok.convert_tokens_to_ids(t) == i for t, i in phi3_v.SPECIALS.items())
        assert tok.bos_token == "<s>" and tok.pad_token == "<|endoftext|>"
        if manifest["tokenizer"] == "real:llama2":  # Llama-2's text tokens, Phi-3's specials after them
            assert len(tok) == 32045 and (path / "tokenizer.LICENSE.package").is_file()
            text = "The ball waits by the red door, 42 times."
            llama2 = PreTrainedTokenizerFast.from_pretrained(SHARED_TOKENIZERS / "llama2")
            assert tok.encode(text, add_special_tokens=False) == llama2.encode(text, add_special_tokens=False)
        else:
            assert manifest["tokenizer"] == "stand-in" and not (SHARED_TOKENIZERS / "llama2").is_dir()


def test_published_kimi_config_gives_the_published_tensor_count():
    assert len(kimi_vl.hub_tensor_shapes(kimi_vl.HUB_CONFIG)) == kimi_vl.HUB_TENSOR_COUNT == 5679


# ----- a checkpoint that does not match ----------------------------------------------------------------------
def variant(src: Path, dst: Path) -> Path:
    """A copy of ``src`` made of symlinks (shards are large), ready to have one file replaced."""
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).symlink_to(f)
    return dst


def rewrite_shard(path: Path, edit) -> str:
    """Apply ``edit(tensors) -> tensors`` to the smallest shard and update the index; returns the shard name."""
    index = json.loads((path / INDEX).read_text())
    shard = min(set(index["weight_map"].values()), key=lambda s: (path / s).stat().st_size)
    tensors = edit(load_file(str(path / shard)))
    (path / shard).unlink()
    save_file(tensors, str(path / shard), metadata={"format": "pt"})
    index["weight_map"] = {n: s for n, s in index["weight_map"].items() if s != shard} | {n: shard for n in tensors}
    (path / INDEX).unlink()
    (path / INDEX).write_text(json.dumps(index))
    return shard


def load(name: str, path: Path):
    return LOAD[name](path, dtype=torch.float32, device="cpu", attn_implementation="sdpa")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.shaped
@pytest.mark.full
def test_one_renamed_tensor_fails_naming_it(shaped, name, tmp_path):
    path = variant(shaped(name), tmp_path / "ckpt")
    renamed = {}

    def edit(tensors):
        old = sorted(tensors)[0]
        renamed["old"], renamed["new"] = old, old.replace(".weight", ".wieght") if ".weight" in old else old + "_x"
        tensors[renamed["new"]] = tensors.pop(old)
        return tensors

    rewrite_shard(path, edit)
    with pytest.raises(CheckpointMismatchError) as err:
        load(name, path)
    assert renamed["old"] in str(err.value) and renamed["new"] in str(err.value)
    # through the registry too (the paper-model loader path), with the same message
    with pytest.raises(CheckpointMismatchError, match="is missing"):
        load_model(name, path=path)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.shaped
@pytest.mark.full
def test_extra_and_misshaped_tensors_fail_naming_them(shaped, name, tmp_path):
    extra = variant(shaped(name), tmp_path / "extra")
    rewrite_shard(extra, lambda t: t | {"model.extra.weight": torch.zeros(2)})
    with pytest.raises(
        CheckpointMismatchError, match=r"'model\.extra\.weight' is neither loaded nor in the ignore list"
    ):
        load(name, extra)
    bad = variant(shaped(name), tmp_path / "shape")
    victim = {}

    def transpose(tensors):
        victim["name"] = next(n for n, t in sorted(tensors.items()) if t.ndim == 2 and t.shape[0] != t.shape[1])
        tensors[victim["name"]] = tensors[victim["name"]].t().contiguous()
        return tensors

    rewrite_shard(bad, transpose)
    with pytest.raises(CheckpointMismatchError, match="shape") as err:
        load(name, bad)
    assert victim["name"] in str(err.value)


@pytest.mark.shaped
@pytest.mark.full
def test_index_shard_disagreement_and_corrupt_shard_fail(shaped, tmp_path):
    src = shaped("kimi_vl_a3b")
    path = variant(src, tmp_path / "index")
    index = json.loads((src / INDEX).read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"]["language_model.phantom.weight"] = index["weight_map"][name]
    (path / INDEX).unlink()
    (path / INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointMismatchError, match="does not match the shard headers"):
        HubCheckpoint.open(path)
    broken = variant(src, tmp_path / "truncated")
    shard = sorted(set(index["weight_map"].values()))[-1]
    (broken / shard).unlink()
    (broken / shard).write_bytes((src / shard).read_bytes()[:1000])
    with pytest.raises(CheckpointMismatchError, match=f"{shard}: not a readable safetensors file"):
        HubCheckpoint.open(broken)
    (broken / shard).unlink()
    with pytest.raises(CheckpointMismatchError, match=f"shard {shard} named by"):
        HubCheckpoint.open(broken)


@pytest.mark.parametrize(
    ("name", "field", "value", "match"),
    [
        ("kimi_vl_a3b", ("text_config", "scoring_func"), "softmax", "scoring_func"),
        ("kimi_vl_a3b", ("text_config", "rope_scaling"), {"type": "yarn", "factor": 4}, "rope_scaling"),
        ("kimi_vl_a3b", ("model_type",), "kimi_k25", "model_type"),
        ("phi3_5_vision", ("rope_scaling", "type"), "linear", "rope_scaling"),
        ("phi3_5_vision", ("embd_layer", "hd_transform_order"), "glb_sub", "hd_transform_order"),
    ],
)
@pytest.mark.shaped
@pytest.mark.full
def test_config_the_native_classes_do_not_implement_fails(shaped, tmp_path, name, field, value, match):
    path = variant(shaped(name), tmp_path / "ckpt")
    hub = json.loads((path / "config.json").read_text())
    node = hub
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    (path / "config.json").unlink()
    (path / "config.json").write_text(json.dumps(hub))
    with pytest.raises(CheckpointMismatchError, match=match):
        load(name, path)


@pytest.mark.shaped
@pytest.mark.full
@pytest.mark.skipif(
    not (SHARED_TOKENIZERS / "llama2").is_dir(),
    reason="the real Llama-2 tokenizer files: a stand-in also holds its specials in the base vocabulary, "
    "so renaming the added token moves no id",
)
def test_tokenizer_with_a_special_at_the_wrong_id_fails(shaped, tmp_path):
    path = variant(shaped("phi3_5_vision"), tmp_path / "ckpt")
    tok = json.loads((path / "tokenizer.json").read_text())
    for t in tok["added_tokens"]:
        if t["content"] == "<|image|>":
            t["content"] = "<|img|>"
    (path / "tokenizer.json").unlink()
    (path / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(CheckpointMismatchError, match=r"<\|image\|>"):
        load("phi3_5_vision", path)


# ----- preprocessing, by the published rules -------------------------------------------------------------------
def test_moonvit_preprocessing_pads_rescales_and_patchifies():
    proc = kimi_vl.MoonViTImageProcessor.from_dict(kimi_vl.HUB_PREPROCESSOR)
    pixels, grid = proc(noise_image(0, 56).crop((0, 0, 50, 30)))  # padded to 56 × 56 (a multiple of 28)
    assert grid == (4, 4) and pixels.shape == (16, 3, 14, 14)
    assert torch.all(pixels[15] == -1.0)  # bottom-right patch is all padding: 0 → (0 − 0.5) / 0.5
    big = noise_image(0, 1000)  # 71 × 71 patches > 4096: scaled by √(4096 / 5041) to 901 px, padded to 924
    assert proc.n_tokens(big) == 33 * 33
    assert proc(big)[1] == (66, 66)


@pytest.mark.parametrize(
    ("size", "hd"),
    [((300, 80), (336, 1008)), ((80, 300), (1008, 336)), ((500, 500), (672, 672)), ((1000, 200), (336, 1344))],
)
def test_phi_hd_transform_sizes_and_token_counts(size, hd):
    """num_crops 4: a 3.75:1 image → 3 crops across (1008 × 268, padded to 336 centred: 34 white rows on
    top, 34 below); portrait the same transposed; square → 2 × 2; 5:1 → 4 across (s·⌈s/ratio⌉ ≤ 4)."""
    proc = phi3_v.HDImageProcessor.from_dict(phi3_v.HUB_PREPROCESSOR)
    image = noise_image(0, max(size)).crop((0, 0, *size))
    pixels, got = proc(image)
    assert got == hd
    h, w = hd[0] // 336, hd[1] // 336
    assert pixels.shape == (1 + h * w, 3, 336, 336)
    assert phi3_v.n_image_tokens(got) == (h * w + 1) * 144 + 1 + (h + 1) * 12
    white = (1.0 - torch.tensor(phi3_v.HUB_PREPROCESSOR["image_mean"])) / torch.tensor(
        phi3_v.HUB_PREPROCESSOR["image_std"]
    )
    if hd == (336, 1008):
        torch.testing.assert_close(pixels[1, :, 0, 0], white)
        torch.testing.assert_close(pixels[1, :, -1, 0], white)
        assert not torch.allclose(pixels[1, :, 168, 100], white)


# ----- registry and preflight ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.shaped
@pytest.mark.full
def test_preflight_accepts_the_mapped_models(shaped, tmp_path, name):
    link = tmp_path / {"kimi_vl_a3b": "Kimi-VL-A3B-Instruct", "phi3_5_vision": "Phi-3.5-vision-instruct"}[name]
    link.symlink_to(shaped(name))
    assert preflight(compose_config([f"model={name}", f"paths.models={tmp_path}", "bench=synthetic"])) == []


@pytest.mark.shaped
@pytest.mark.full
def test_writer_refuses_a_directory_holding_a_checkpoint_and_too_few_clip_layers(shaped, tmp_path):
    with pytest.raises(FileExistsError, match="is not empty"):
        shaped_writer("kimi_vl_a3b")(shaped("kimi_vl_a3b"))
    with pytest.raises(ValueError, match="vision_layers >= 2"):
        shaped_writer("phi3_5_vision")(tmp_path / "phi", vision_layers=1)
    assert list(tmp_path.iterdir()) == []
