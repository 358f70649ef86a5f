"""InternVL-Chat-V1.1 on native classes (``kamera/models/internvl_chat.py``).

Unmarked tests use a tiny twin written by the model's own shaped writer with small widths (InternViT 32 wide,
3 layers read at ``hidden_states[-2]``, a 56-px tile → 4 tokens; Llama 512 wide (8 heads of 64: enough for blind reuse
to differ measurably), 2 layers; the real 32,009-row vocabulary with a stand-in tokenizer): the weight plan, the config
refusals, the mapping against the public-semantics reference and the operator's identities, in a few seconds. The
``shaped`` tests run the same on the real-width shaped checkpoint (2 + 2 layers, float32, 5.3 GB), with the real Llama-2
tokenizer when it is beside the checkout.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from shaped_support import need_real_tokenizer
from test_operator import rel_err

import kamera.models.internvl_chat as ivc
from kamera.core import relocate, rotate
from kamera.items.spans import Span
from kamera.metrics import eta, kl
from kamera.models import entry, load_model, place
from kamera.models.hub_checkpoint import CheckpointMismatchError, HubCheckpoint
from kamera.models.shaped import shaped_spec
from kamera.models.shaped.writer import write
from kamera.reuse.context import ReuseContext

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import gpu_check
import remote_reference


def picture(seed: int, size: tuple[int, int]) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))


def tiny_config() -> dict:
    cfg = copy.deepcopy(ivc.HUB_CONFIG)
    cfg["torch_dtype"] = "float32"
    cfg["force_image_size"] = 56
    cfg["llm_config"] |= {
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
    }
    cfg["vision_config"] |= {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "image_size": 56}
    return cfg


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    """The tiny twin: the real writer and file layout, small widths, 3 InternViT layers of which 2 are read."""
    real = shaped_spec("internvl_chat_v1_1")
    spec = dataclasses.replace(
        real,
        config=tiny_config(),
        files=real.files | {"preprocessor_config.json": ivc.HUB_PREPROCESSOR | {"size": 56, "crop_size": 56}},
        tokenizer=dataclasses.replace(real.tokenizer, base=None),
    )
    return write(spec, tmp_path_factory.mktemp("tiny") / "InternVL-Chat-V1-1", layers=2, vision_layers=3)


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return ivc.load_internvl_chat_v1_1(tiny_dir, dtype=torch.float32, device="cpu", attn_implementation="sdpa")


def spans(size: tuple[int, int]) -> list[Span]:
    return [
        Span("prefix", ("Answer with a letter.",)),
        Span("A", ("the key is number 1 and it is red.",)),
        Span("B", (picture(2, size), "the ball is by the door")),
        Span("query", ("Which colour is at the door? A, B, C or D.",)),
    ]


# ----- the weight plan -----------------------------------------------------------------------------------
def plan_and_model(tiny_dir: Path):
    hub = json.loads((tiny_dir / "config.json").read_text())
    assert hub["select_layer"] == -2 and hub["vision_config"]["num_hidden_layers"] == 3
    used = ivc.read_layers(hub, 3)
    with torch.device("meta"):
        model = ivc.InternVLChatModel(tf_llama(hub), tf_vision(hub, used), 0.5, "v1")
    return ivc.weight_plan(hub, used), model, HubCheckpoint.open(tiny_dir)


def tf_llama(hub: dict):
    import transformers as tf

    return tf.LlamaForCausalLM(ivc.native_text_config(hub))


def tf_vision(hub: dict, used: int):
    import transformers as tf

    return tf.InternVLVisionModel(ivc.native_vision_config(hub, used))


def test_the_plan_loads_every_tensor_but_the_unread_layer(tiny_dir):
    plan, model, ckpt = plan_and_model(tiny_dir)
    plan.check(ckpt, model)
    used = {s for load in plan.loads for s in load.sources}
    ignored = sorted(ckpt.names - used)
    assert ignored and all(n.startswith("vision_model.encoder.layers.2.") for n in ignored)
    assert len(model.vision_model.encoder.layer) == 2  # hidden_states[-2] of 3 layers: the output of layer 1
    qkv = [ld for ld in plan.loads if ld.sources == ["vision_model.encoder.layers.0.attn.qkv.weight"]]
    assert sorted(ld.target.rsplit(".", 2)[-2] for ld in qkv) == ["k_proj", "q_proj", "v_proj"]


def edited(ckpt: HubCheckpoint, drop: str = "", add: str = "", shape: tuple[str, tuple[int, ...]] | None = None):
    shapes = {n: s for n, s in ckpt.shapes.items() if n != drop}
    where = {n: s for n, s in ckpt.weight_map.items() if n != drop}
    if add:
        shapes[add], where[add] = (4,), next(iter(where.values()))
    if shape:
        shapes[shape[0]] = shape[1]
    return HubCheckpoint(ckpt.path, where, shapes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "vision_model.encoder.layers.1.ls2"}, "tensor 'vision_model.encoder.layers.1.ls2' is missing"),
        (
            {"add": "vision_model.encoder.layers.0.attn.extra"},
            "'vision_model.encoder.layers.0.attn.extra' is neither loaded",
        ),
        ({"shape": ("mlp1.1.weight", (512, 100))}, "'mlp1.1.weight' gives mlp1.1.weight the shape (512, 100)"),
        (
            {"shape": ("vision_model.encoder.layers.0.attn.qkv.weight", (90, 32))},
            "attention.q_proj.weight the shape (30, 32)",
        ),
    ],
)
def test_a_bad_checkpoint_is_refused_naming_the_tensor(tiny_dir, change, message):
    plan, model, ckpt = plan_and_model(tiny_dir)
    with pytest.raises(CheckpointMismatchError) as err:
        plan.check(edited(ckpt, **change), model)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_nothing_is_copied_from_a_checkpoint_the_plan_refuses(tiny, tiny_dir):
    plan, _, ckpt = plan_and_model(tiny_dir)
    before = tiny.model.mlp1[1].weight.detach().clone()
    with pytest.raises(CheckpointMismatchError, match=r"mlp1\.1\.weight the shape"):
        plan.apply(edited(ckpt, shape=("mlp1.1.weight", (512, 100))), tiny.model)
    assert torch.equal(tiny.model.mlp1[1].weight, before)


def test_the_loader_names_a_tensor_missing_from_the_files(tiny_dir, tmp_path):
    bad = tmp_path / "InternVL-Chat-V1-1"
    shutil.copytree(tiny_dir, bad)
    index = json.loads((bad / "model.safetensors.index.json").read_text())
    name = "vision_model.encoder.layers.0.attn.q_norm.weight"
    shard = bad / index["weight_map"].pop(name)
    save_file({k: v for k, v in load_file(shard).items() if k != name}, str(shard), metadata={"format": "pt"})
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointMismatchError, match=f"tensor '{name}' is missing"):
        ivc.load_internvl_chat_v1_1(bad, dtype=torch.float32, device="cpu", attn_implementation="sdpa")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update(model_type="internvl"), "model_type 'internvl', expected 'internvl_chat'"),
        (lambda c: c["llm_config"].update(architectures=["InternLM2ForCausalLM"]), "only LlamaForCausalLM is mapped"),
        (lambda c: c["llm_config"].update(rope_scaling={"type": "dynamic", "factor": 2.0}), "llm_config.rope_scaling"),
        (lambda c: c["vision_config"].update(layer_norm_eps=1e-5), "layer_norm_eps must be 1e-6"),
        (lambda c: c.update(select_layer=-49), "select_layer -49 reads no InternViT layer of 48"),
    ],
)
def test_configs_the_native_classes_do_not_implement_are_refused(edit, message):
    cfg = copy.deepcopy(ivc.HUB_CONFIG)
    edit(cfg)
    with pytest.raises(CheckpointMismatchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ivc.native_config(cfg)


def test_an_unknown_pixel_shuffle_version_is_refused(tiny_dir):
    hub = json.loads((tiny_dir / "config.json").read_text())
    with torch.device("meta"), pytest.raises(CheckpointMismatchError, match="ps_version 'v3'"):
        ivc.InternVLChatModel(tf_llama(hub), tf_vision(hub, 2), 0.5, "v3")


# ----- preprocessing, layout, chat ------------------------------------------------------------------------
def test_one_tile_bicubic_and_imagenet_normalisation(tiny):
    image = picture(5, (90, 40))
    px = tiny.image_processor(image)
    assert px.shape == (1, 3, 56, 56)
    want = np.asarray(image.resize((56, 56), Image.Resampling.BICUBIC), np.float32)[7, 9] / 255.0
    got = px[0, :, 7, 9].numpy() * np.asarray(ivc.HUB_PREPROCESSOR["image_std"]) + ivc.HUB_PREPROCESSOR["image_mean"]
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_image_token_layout_and_chat(tiny):
    piece = tiny._vision(picture(3, (84, 56)))
    assert tiny.image_ids == (32000, 32002, 32001)
    assert piece.ids == [32000, *[32002] * 4, 32001] and piece.visual == [False, *[True] * 4, False]
    enc = tiny.encode(spans((84, 56)))
    assert int(enc.spans[0].input_ids[0]) == 1  # <s> opens the header
    assert tiny.chat == ("<s> <human>: ", " <bot>:") and tiny.stop_ids() == (2,)


def test_pixel_shuffle_v1_is_the_transpose_of_v2():
    x = torch.arange(2 * 4 * 4 * 3, dtype=torch.float32).reshape(2, 4, 4, 3)
    v1, v2 = ivc.pixel_shuffle(x, 0.5, "v1"), ivc.pixel_shuffle(x, 0.5, "v2")
    assert v1.shape == v2.shape == (2, 2, 2, 12)
    assert torch.equal(v1, v2.transpose(1, 2)) and not torch.equal(v1, v2)
    # v2 token (i, j) = patches (2i, 2j), (2i, 2j + 1), (2i + 1, 2j), (2i + 1, 2j + 1), channels concatenated
    torch.testing.assert_close(v2[0, 1, 0], torch.cat([x[0, 2, 0], x[0, 2, 1], x[0, 3, 0], x[0, 3, 1]]))


def test_native_mapping_matches_the_public_reference(tiny, tiny_dir):
    cfg = json.loads((tiny_dir / "config.json").read_text())
    px = tiny.image_processor(picture(4, (70, 56)))
    W = remote_reference.Weights(tiny_dir)
    with torch.no_grad():
        ours = tiny.model.image_features(px).double()
    torch.testing.assert_close(ours, remote_reference.internvit_tokens(W, cfg, px).double(), rtol=1e-5, atol=1e-6)
    transposed = remote_reference.internvit_tokens(W, cfg | {"ps_version": "v2"}, px).double()
    assert float((ours - transposed).abs().max()) > 1e-3  # the token order is what the comparison checks
    item = spans((70, 56))[1:]
    enc = tiny.encode(item)
    ids = torch.cat([s.input_ids for s in enc.spans]).tolist()
    theirs = remote_reference.internvl_chat_logits(tiny_dir, ids, [(tiny.image_processor(item[1].parts[0]), (56, 56))])
    got = tiny.forward(place(enc.spans)).logits.double()
    assert float((got - theirs).abs().max()) <= 1e-5 * float(theirs.abs().max())


# ----- the operator's identities (float32) ----------------------------------------------------------------
def identities(adapter, size: tuple[int, int]) -> None:
    """Relocation exact, full rank = re-prefill, rank 0 = blind, 4D-mask oracle = blind at native positions.

    Relocation: B moved by R(δ) = B prefilled at +δ (keys to 1e-5 at every layer, values untouched), and layer-0
    keys moved by R(1000) = a float64-angle rotation to 1e-6 (farther, the model's own float32 p·θ carries ~1e-5)."""
    item = spans(size)
    b = adapter.encode_span(item[2])
    at = {d: adapter.read(adapter.forward([(b, d)]).cache, 0, b.n_tokens, b.local_pos + d) for d in (0, 37, 97)}
    k = next(i for i, s in enumerate(adapter.specs) if s.rotary is not None)
    for d in (37, 97):
        moved = relocate(at[0], d)
        assert rel_err(moved, at[d], k) <= 1e-5 and all(
            m[1 - k] is c[1 - k] for m, c in zip(moved.layers, at[0].layers, strict=True)
        )
    spec, keys0 = adapter.specs[k].rotary, at[0].layers[0][k].double()
    exact = torch.stack([rotate(rotate(keys0[t], -t, spec), 1000 + t, spec) for t in range(b.n_tokens)])
    assert float((relocate(at[0], 1000).layers[0][k].double() - exact).norm() / exact.norm()) <= 1e-6
    ctx = ReuseContext(adapter, item)
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    assert kl_blind > 1e-6
    full = ctx.patch.apply(ctx.relocated)
    assert max(rel_err(full, ctx.conditioned, c) for c in range(2)) <= 1e-5
    assert eta(kl(ctx.reprefill_logits, ctx.query(full).logits), kl_blind) >= 0.999
    assert torch.equal(ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits, ctx.blind.logits)
    native = ReuseContext(adapter, ctx.enc, canonical_context="native")
    assert native.delta == 0
    torch.testing.assert_close(native.blind.logits, native.oracle.logits, rtol=0, atol=1e-4)


def test_identities_on_the_tiny_twin(tiny):
    assert [(s.name, s.heads, s.dim) for s in tiny.specs] == [("k", 8, 64), ("v", 8, 64)]
    identities(tiny, (84, 56))


# ----- the real-width shaped checkpoint -------------------------------------------------------------------
@pytest.fixture(scope="module")
def shaped_dir(shaped_root) -> Path:
    return Path(shaped_root("internvl_chat_v1_1")) / entry("internvl_chat_v1_1").repo_dir


@pytest.mark.shaped
@pytest.mark.full
def test_remote_equivalence_on_the_shaped_checkpoint(shaped_dir):
    """First of the shaped tests: it loads its own adapter, so no other one is in memory beside it."""
    result = gpu_check.remote_equivalence("internvl_chat_v1_1", shaped_dir, "cpu", "float32", size=(84, 56))
    assert result.ok and "public-semantics reference" in result.reference
    assert result.n_tokens > 256 and result.kl <= 1e-9 and result.top1_agree


@pytest.fixture(scope="module")
def shaped(shaped_dir):
    return load_model("internvl_chat_v1_1", path=shaped_dir, dtype="float32")


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_layout_and_cache(shaped, shaped_dir):
    hub = json.loads((shaped_dir / "config.json").read_text())
    assert hub["select_layer"] == -2 and hub["vision_config"]["num_hidden_layers"] == 2
    assert len(shaped.model.vision_model.encoder.layer) == 1
    piece = shaped._vision(picture(3, (84, 56)))
    assert piece.ids == [32000, *[32002] * 256, 32001] and piece.features.shape == (256, 5120)
    assert [(s.name, s.heads, s.dim) for s in shaped.specs] == [("k", 40, 128), ("v", 40, 128)]
    assert shaped.max_positions == 4096


@pytest.mark.shaped
@pytest.mark.full
def test_shaped_chat_with_the_real_llama2_tokenizer(shaped, shaped_dir):
    need_real_tokenizer("internvl_chat_v1_1")
    assert json.loads((shaped_dir / "shaped.json").read_text())["tokenizer"] == "real:llama2"
    tok = shaped.tokenizer
    assert tok.convert_ids_to_tokens(list(range(32000, 32009))) == list(ivc.ADDED_TOKENS)
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "Hi there"}], tokenize=False, add_generation_prompt=True
    )
    header, footer = shaped.chat
    assert rendered == header + "Hi there" + footer
    assert shaped.tokenize(rendered)[:4] == [1, *tok.encode(" <human>:", add_special_tokens=False)[:3]]


@pytest.mark.shaped
@pytest.mark.full
def test_identities_on_the_shaped_checkpoint(shaped):
    identities(shaped, (84, 56))
