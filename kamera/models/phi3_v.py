"""Phi-3.5-vision (``microsoft/Phi-3.5-vision-instruct``, remote code ``phi3_v``) on native transformers classes.

The Hub checkpoint's own tensors load into a native ``Phi3ForCausalLM`` (MHA: 32 heads × 96, cache
K | V per head), a native ``CLIPVisionModel`` (ViT-L/14-336) cut after the layer the model reads, and
the two HD-transform pieces the remote code adds: the learned separators ``glb_GN`` / ``sub_GN`` and a
2-layer projector. Nothing of the remote code runs.

Sources (read, not copied; facts restated in ``docs/remote_models.md``):
- config.json: the published one, as reproduced in github.com/sdpython/experimental-experiment
  ``experimental_experiment/torch_models/llm_model_helper.py`` (``get_phi_35_vision_instruct``).
- image embedding: the Hub ``modeling_phi3_v.py`` (copy in the same repository,
  ``experimental_experiment/torch_models/fromhub/modeling_phi3_v.py``) and vLLM
  ``vllm/model_executor/models/phi3v.py`` ``Phi3HDImageEmbedding``: CLIP ViT-L/14-336 with quick-gelu,
  features = ``hidden_states[layer_idx = -2]`` without the CLS token; each 24×24 crop is merged 2×2 into
  12×12 tokens of 4096; sub-crops are tiled into (h·12) × (w·12), every row ends with ``sub_GN`` (the
  newline), then ``glb_GN``, then the global image's 12 rows of 12 + newline; all through
  Linear(4096, 3072) → GELU → Linear(3072, 3072). Tokens: (h·w + 1)·144 + 1 + (h + 1)·12. Names: vLLM's
  ``model.vision_embed_tokens`` prefix; CLIP keeps its own names under ``img_processor``.
- HD crop preprocessing: the Hub ``processing_phi3_v.py`` (copy in github.com/g1y5x3/vlm-study):
  transpose portrait images, pick the largest scale s with s·⌈s / ratio⌉ ≤ num_crops, resize (bilinear,
  PIL) to width 336·s, pad the height to a multiple of 336 centred with white, normalise with CLIP's
  mean / std, global image = bicubic 336×336 of the padded image, crops in raster order.
- decoder: the remote ``Phi3Attention`` (fused qkv_proj, ``Phi3SuScaledRotaryEmbedding``: short factors
  up to 4,096 positions, attention scaling √(1 + ln 32 / ln 4096)) is the native ``phi3`` longrope one.
- specials: Phi-3's chat tokens 32000–32010 (pytorch/torchtune ``torchtune/models/phi3/_tokenizer.py``),
  ``<|image|>`` = 32044 (vLLM ``phi3v.py`` ``_IMAGE_TOKEN_ID``); chat layout ``<|user|>\\n…<|end|>\\n<|assistant|>\\n``
  (vLLM ``examples/offline_inference/vision_language.py`` ``run_phi3v``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers as tf
from PIL import Image
from torch import nn

from kamera.models.hub_checkpoint import (
    CheckpointMismatchError,
    HubCheckpoint,
    Ignored,
    Load,
    WeightPlan,
    build_empty,
    check_specials,
    open_remote,
)
from kamera.models.mha import MHAAdapter
from kamera.models.shaped.writer import published_json

SHORT_FACTOR = [1.08, 1.1, 1.1300000000000001, 1.2800000000000002, 1.3100000000000003, 1.4500000000000004,
                1.4500000000000004, 1.9500000000000008, 2.030000000000001, 2.4299999999999926, 2.5699999999999896,
                2.9499999999999815, 3.729999999999965, 3.869999999999962, 4.189999999999955, 4.43999999999995,
                4.6399999999999455, 4.979999999999938, 5.159999999999934, 5.279999999999932, 5.759999999999922,
                5.889999999999919, 5.889999999999919, 5.969999999999917, 6.089999999999915, 6.2799999999999105,
                6.7699999999999, 6.8899999999998975, 7.109999999999893, 7.129999999999892, 7.179999999999891,
                7.289999999999889, 7.339999999999888, 7.559999999999883, 7.619999999999882, 7.69999999999988,
                7.879999999999876, 7.879999999999876, 7.879999999999876, 7.939999999999875, 7.949999999999875,
                7.979999999999874, 8.19999999999987, 8.439999999999864, 8.469999999999864, 8.589999999999861,
                8.809999999999857, 8.999999999999853]
LONG_FACTOR = [1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601, 1.5899999141693115,
               1.600000023841858, 1.6200000047683716, 2.620000123977661, 3.2300000190734863, 3.2300000190734863,
               4.789999961853027, 7.400000095367432, 7.700000286102295, 9.09000015258789, 12.199999809265137,
               17.670000076293945, 24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
               32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992, 50.340003967285156,
               50.45000457763672, 57.55000305175781, 57.93000411987305, 58.21000289916992, 60.1400032043457,
               62.61000442504883, 62.62000274658203, 62.71000289916992, 63.1400032043457, 63.1400032043457,
               63.77000427246094, 63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
               64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938, 64.4800033569336,
               64.51000213623047, 64.52999877929688, 64.83999633789062]
HUB_CONFIG: dict = published_json("phi3_5_vision")  # the published config.json (kamera/models/shaped/configs/)
# The remote code builds CLIP ViT-L/14-336 from constants, not from config.json (its CLIP_VIT_LARGE_PATCH14_336_CONFIG).
CLIP_L14_336 = dict(hidden_size=1024, intermediate_size=4096, num_attention_heads=16, num_hidden_layers=24,
                    image_size=336, patch_size=14, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=768)
HUB_PREPROCESSOR: dict = published_json("phi3_5_vision", "preprocessor_config.json")
IMAGE_TOKEN, IMAGE_ID = "<|image|>", 32044
SPECIALS: dict[str, int] = {
    "<|endoftext|>": 32000, "<|assistant|>": 32001, "<|placeholder1|>": 32002, "<|placeholder2|>": 32003,
    "<|placeholder3|>": 32004, "<|placeholder4|>": 32005, "<|system|>": 32006, "<|end|>": 32007,
    "<|placeholder5|>": 32008, "<|placeholder6|>": 32009, "<|user|>": 32010,
}
CHAT = ("<s><|user|>\n", "<|end|>\n<|assistant|>\n")
CHAT_TEMPLATE = (
    "{{ bos_token }}{%- for m in messages -%}<|{{ m['role'] }}|>\n"
    "{%- if m['content'] is string -%}{{ m['content'] }}{%- else -%}{%- for p in m['content'] -%}"
    "{%- if p['type'] == 'image' -%}<|image_{{ loop.index }}|>\n{%- else -%}{{ p['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}<|end|>\n{%- endfor -%}{%- if add_generation_prompt -%}<|assistant|>\n{%- endif -%}"
)
VISION = "model.vision_embed_tokens."
CLIP = VISION + "img_processor.vision_model."


def _require(cfg: dict, key: str, want) -> None:
    if cfg.get(key) != want:
        raise CheckpointMismatchError(f"config.json {key} = {cfg.get(key)!r}; the native mapping implements {want!r}")


def native_text_config(hub: dict) -> tf.Phi3Config:
    """The native phi3 config of a Phi-3.5-V config.json (LongRoPE 'su' = native 'longrope')."""
    _require(hub, "model_type", "phi3_v")
    _require(hub, "hidden_act", "silu")
    rope = hub.get("rope_scaling") or {}
    if rope.get("type") not in ("su", "longrope"):
        raise CheckpointMismatchError(f"config.json rope_scaling type {rope.get('type')!r}; expected 'su' (LongRoPE)")
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "original_max_position_embeddings", "rms_norm_eps",
            "bos_token_id", "eos_token_id", "pad_token_id")
    return tf.Phi3Config(
        **{k: hub[k] for k in keys}, hidden_act="silu", tie_word_embeddings=False, attention_dropout=0.0,
        resid_pdrop=0.0, embd_pdrop=0.0,
        # the window (262,144) exceeds max_position_embeddings: no position is ever outside it
        sliding_window=None,
        rope_parameters={"rope_type": "longrope", "rope_theta": float(hub["rope_theta"]),
                         "short_factor": list(rope["short_factor"]), "long_factor": list(rope["long_factor"]),
                         "original_max_position_embeddings": hub["original_max_position_embeddings"],
                         "factor": hub["max_position_embeddings"] / hub["original_max_position_embeddings"]},
    )


def read_vision(hub: dict, ckpt_layers: int) -> tuple[tf.CLIPVisionConfig, int]:
    """The native CLIP config cut after the layer the model reads, and that layer count."""
    img, embd = hub.get("img_processor") or {}, hub.get("embd_layer") or {}
    _require(img, "model_name", "openai/clip-vit-large-patch14-336")
    _require(img, "image_dim_out", CLIP_L14_336["hidden_size"])
    _require(img, "num_img_tokens", 144)
    if img.get("type_feature", "patch") != "patch":
        raise CheckpointMismatchError(
            f"img_processor.type_feature {img['type_feature']!r}; only 'patch' is implemented"
        )
    for key, want in (
        ("use_hd_transform", True),
        ("with_learnable_separator", True),
        ("hd_transform_order", "sub_glb"),
        ("projection_cls", "mlp"),
    ):
        _require(embd, key, want)
    layer_idx = int(img.get("layer_idx", -2))
    used = layer_idx % (ckpt_layers + 1)  # hidden_states[k] is the output of k layers (0 = embeddings)
    if not 1 <= used <= ckpt_layers:
        raise CheckpointMismatchError(f"img_processor.layer_idx {layer_idx} reads no CLIP layer of {ckpt_layers}")
    return tf.CLIPVisionConfig(**(CLIP_L14_336 | {"num_hidden_layers": used})), used


def native_config(hub: dict) -> tf.LlavaConfig:
    """The config the cost model reads for a Phi-3.5-V config.json (``kamera.models.flops.published_config``): the
    native phi3 text config and the CLIP tower up to the layer the model reads, in a LLaVA-shaped config; each
    language-model image token merges 2 × 2 CLIP patches (``merge_2x2``), which the cost model counts as a
    pixel-shuffle ``scale_factor`` of 2."""
    vision, _ = read_vision(hub, CLIP_L14_336["num_hidden_layers"])
    return tf.LlavaConfig(text_config=native_text_config(hub).to_dict(), vision_config=vision.to_dict(), scale_factor=2)


# ----- the native model ----------------------------------------------------------------------------------
class Phi3VisionModel(nn.Module):
    """Phi-3.5-V as native parts: ``language_model`` (Phi3ForCausalLM), ``vision_tower`` (CLIPVisionModel up
    to the read layer), the separators ``glb_GN`` [1, 1, 4·d] / ``sub_GN`` [1, 1, 1, 4·d] and ``img_projection``."""

    def __init__(self, language_model: tf.Phi3ForCausalLM, vision_tower: tf.CLIPVisionModel) -> None:
        super().__init__()
        self.language_model = language_model
        self.vision_tower = vision_tower
        self.config = language_model.config
        d, h = vision_tower.config.hidden_size * 4, self.config.hidden_size
        p = next(language_model.parameters())
        self.glb_GN = nn.Parameter(torch.empty(1, 1, d, dtype=p.dtype, device=p.device))
        self.sub_GN = nn.Parameter(torch.empty(1, 1, 1, d, dtype=p.dtype, device=p.device))
        self.img_projection = nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, h)).to(p.device, p.dtype)

    def get_output_embeddings(self) -> nn.Module:
        return self.language_model.lm_head

    def image_features(self, pixel_values: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """[1 + h·w, 3, 336, 336] (global, then crops) of an HD image of ``size`` (H, W) → [n_tokens, hidden]."""
        h, w = size[0] // 336, size[1] // 336
        patches = self.vision_tower(pixel_values).last_hidden_state[:, 1:]  # drop CLS: [1 + h·w, 576, 1024]
        glb = with_newlines(merge_2x2(patches[:1], 1, 1), self.sub_GN)
        sub = with_newlines(merge_2x2(patches[1:], h, w), self.sub_GN)
        return self.img_projection(torch.cat([sub, self.glb_GN[0], glb]))


def merge_2x2(patches: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """[h·w crops, 24·24, C] → [h·12, w·12, 4C]: each 2×2 patch block to one token, crops tiled in raster order."""
    n, length, c = patches.shape
    side = math.isqrt(length)
    x = (
        patches.reshape(n, side // 2, 2, side // 2, 2, c)
        .permute(0, 1, 3, 2, 4, 5)
        .reshape(n, side // 2, side // 2, 4 * c)
    )
    return (
        x.reshape(h, w, side // 2, side // 2, 4 * c).permute(0, 2, 1, 3, 4).reshape(h * side // 2, w * side // 2, 4 * c)
    )


def with_newlines(grid: torch.Tensor, newline: torch.Tensor) -> torch.Tensor:
    """[rows, cols, C] → [rows·(cols + 1), C]: the newline vector after every row."""
    rows = grid.shape[0]
    return torch.cat([grid, newline[0].expand(rows, 1, -1)], dim=1).reshape(-1, grid.shape[-1])


def n_image_tokens(size: tuple[int, int]) -> int:
    """Tokens of an HD image of padded size (H, W): (h·w + 1)·144 + 1 + (h + 1)·12."""
    h, w = size[0] // 336, size[1] // 336
    return (h * w + 1) * 144 + 1 + (h + 1) * 12


@dataclass(frozen=True)
class HDImageProcessor:
    """Phi-3.5-V's HD crop preprocessing from preprocessor_config.json (sources in the module docstring)."""

    num_crops: int = 4
    image_mean: tuple[float, float, float] = (0.48145466, 0.4578275, 0.40821073)
    image_std: tuple[float, float, float] = (0.26862954, 0.26130258, 0.27577711)
    crop: int = 336

    @classmethod
    def from_dict(cls, cfg: dict) -> HDImageProcessor:
        try:
            return cls(int(cfg["num_crops"]), tuple(cfg["image_mean"]), tuple(cfg["image_std"]))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointMismatchError(f"preprocessor_config.json lacks or mistypes {err}") from err

    def hd_image(self, image: Image.Image) -> Image.Image:
        """Resized to 336·s wide (s crops across), height padded to a multiple of 336, centred, white."""
        img = image.convert("RGB")
        portrait = img.width < img.height
        if portrait:
            img = img.transpose(Image.Transpose.TRANSPOSE)
        ratio = img.width / img.height
        scale = 1
        while scale * math.ceil(scale / ratio) <= self.num_crops:
            scale += 1
        scale -= 1
        new_w = int(scale * self.crop)
        new_h = int(new_w / ratio)
        img = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
        target = math.ceil(new_h / self.crop) * self.crop
        top = (target - new_h) // 2
        canvas = Image.new("RGB", (new_w, target), (255, 255, 255))
        canvas.paste(img, (0, top))
        return canvas.transpose(Image.Transpose.TRANSPOSE) if portrait else canvas

    def __call__(self, image: Image.Image) -> tuple[torch.Tensor, tuple[int, int]]:
        """Pixels [1 + crops, 3, 336, 336] (global first, float32) and the HD size (H, W)."""
        hd = self.hd_image(image)
        arr = (np.asarray(hd, dtype=np.float32) / 255.0 - np.asarray(self.image_mean, np.float32)) / np.asarray(
            self.image_std, np.float32
        )
        x = torch.from_numpy(arr).permute(2, 0, 1)  # [3, H, W]
        c = self.crop
        H, W = x.shape[1:]
        glb = F.interpolate(x[None], size=(c, c), mode="bicubic")
        crops = x.reshape(3, H // c, c, W // c, c).permute(1, 3, 0, 2, 4).reshape(-1, 3, c, c)
        return torch.cat([glb, crops]).contiguous(), (H, W)


# ----- the adapter ---------------------------------------------------------------------------------------
class Phi3VAdapter(MHAAdapter):
    """Phi-3.5-V: MHA cache (K | V, 32 heads × 96), one ``<|image|>`` slot per image feature row."""

    family = "phi3_v"

    def _language_model(self) -> nn.Module:
        return self.model.language_model.model

    @property
    def max_positions(self) -> int:
        """LongRoPE switches every position to the long factors once a forward reaches past
        ``original_max_position_embeddings`` (4,096); a span prefilled alone would then rotate with other
        frequencies than in context, so relocation is only exact below it: items beyond are refused."""
        return int(self.text_config.rope_parameters["original_max_position_embeddings"])

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        pixels, size = self.image_processor(image)
        return {"pixel_values": pixels.to(self.dtype), "image_sizes": torch.tensor(size)}

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        return self.model.image_features(pixels["pixel_values"], tuple(pixels["image_sizes"].tolist())), None

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        return [IMAGE_ID] * n, [True] * n

    def stop_ids(self) -> tuple[int, ...]:
        """End of text, plus the turn end ``<|end|>`` and ``<|endoftext|>`` the chat format closes with."""
        return (*super().stop_ids(), SPECIALS["<|end|>"], SPECIALS["<|endoftext|>"])


# ----- names and the plan --------------------------------------------------------------------------------
def hub_tensor_shapes(hub: dict, vision_layers: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of a Phi-3.5-V checkpoint with this config and CLIP depth, in save order, with its shape."""
    h, i, v = hub["hidden_size"], hub["intermediate_size"], hub["vocab_size"]
    heads, kv = hub["num_attention_heads"], hub["num_key_value_heads"]
    hd = h // heads
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (v, h))]
    for layer in range(hub["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out += [
            (p + "self_attn.qkv_proj.weight", ((heads + 2 * kv) * hd, h)),
            (p + "self_attn.o_proj.weight", (h, h)),
            (p + "mlp.gate_up_proj.weight", (2 * i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    c, ci = CLIP_L14_336["hidden_size"], CLIP_L14_336["intermediate_size"]
    out += [
        ("model.norm.weight", (h,)),
        (VISION + "glb_GN", (1, 1, 4 * c)),
        (VISION + "sub_GN", (1, 1, 1, 4 * c)),
        (VISION + "img_projection.0.weight", (h, 4 * c)),
        (VISION + "img_projection.0.bias", (h,)),
        (VISION + "img_projection.2.weight", (h, h)),
        (VISION + "img_projection.2.bias", (h,)),
        (CLIP + "embeddings.class_embedding", (c,)),
        (CLIP + "embeddings.patch_embedding.weight", (c, 3, 14, 14)),
        (CLIP + "embeddings.position_embedding.weight", ((336 // 14) ** 2 + 1, c)),
        (CLIP + "pre_layrnorm.weight", (c,)),
        (CLIP + "pre_layrnorm.bias", (c,)),
    ]
    for layer in range(vision_layers):
        p = f"{CLIP}encoder.layers.{layer}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            out += [(f"{p}self_attn.{proj}.weight", (c, c)), (f"{p}self_attn.{proj}.bias", (c,))]
        out += [
            (p + "layer_norm1.weight", (c,)),
            (p + "layer_norm1.bias", (c,)),
            (p + "mlp.fc1.weight", (ci, c)),
            (p + "mlp.fc1.bias", (ci,)),
            (p + "mlp.fc2.weight", (c, ci)),
            (p + "mlp.fc2.bias", (c,)),
            (p + "layer_norm2.weight", (c,)),
            (p + "layer_norm2.bias", (c,)),
        ]
    out += [(CLIP + "post_layernorm.weight", (c,)), (CLIP + "post_layernorm.bias", (c,)), ("lm_head.weight", (v, h))]
    return out


def clip_layers(ckpt: HubCheckpoint) -> int:
    """CLIP encoder layers stored in the checkpoint (the remote code builds them from constants)."""
    found = [int(m.group(1)) for n in ckpt.names if (m := re.match(re.escape(CLIP) + r"encoder\.layers\.(\d+)\.", n))]
    if not found:
        raise CheckpointMismatchError(f"{ckpt.path}: no CLIP encoder layers under {CLIP}encoder.layers")
    return max(found) + 1


def weight_plan(hub: dict, ckpt_layers: int, used: int) -> WeightPlan:
    """Every native tensor with its checkpoint source; CLIP layers past the read one are ignored."""
    loads = []
    for name, _ in hub_tensor_shapes(hub, used):
        if name.startswith(CLIP):
            loads.append(Load.copy("vision_tower." + name[len(CLIP) :], name))
        elif name.startswith(VISION):
            loads.append(Load.copy(name[len(VISION) :], name))
        else:
            loads.append(Load.copy("language_model." + name, name))
    ignored = [
        Ignored(re.escape(CLIP) + r"embeddings\.position_ids", "an index buffer, recomputed"),
        Ignored(re.escape(VISION) + r"wte\.weight", "the remote code's alias of model.embed_tokens.weight"),
        Ignored(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq", "recomputed from rope_theta and the factors"),
    ]
    if used < ckpt_layers:
        unread = "|".join(str(k) for k in range(used, ckpt_layers))
        ignored.append(
            Ignored(
                re.escape(CLIP) + rf"encoder\.layers\.({unread})\..+",
                f"after hidden_states[layer_idx]: the model reads the output of CLIP layer {used - 1}",
            )
        )
    return WeightPlan(loads, ignored)


def load_phi3_5_vision(path: Path, *, dtype: torch.dtype, device: str, attn_implementation: str) -> Phi3VAdapter:
    """Load a Phi-3.5-V checkpoint directory (Hub layout) into native modules; no remote code runs."""
    remote = open_remote(path, native_text_config, HDImageProcessor)
    ckpt_layers = clip_layers(remote.ckpt)
    vision_config, used = read_vision(remote.hub, ckpt_layers)
    plan = weight_plan(remote.hub, ckpt_layers, used)
    # tokenizer.json alone: config.json names remote code
    tokenizer = tf.PreTrainedTokenizerFast.from_pretrained(remote.path)
    check_specials(
        tokenizer,
        {IMAGE_TOKEN: IMAGE_ID, **{k: SPECIALS[k] for k in ("<|user|>", "<|assistant|>", "<|end|>")}},
        remote.path,
    )
    model = remote.load(
        lambda: Phi3VisionModel(
            build_empty(tf.Phi3ForCausalLM, remote.config, dtype, attn_implementation),
            build_empty(tf.CLIPVisionModel, vision_config, dtype, attn_implementation),
        ),
        plan,
        device,
    )
    adapter = Phi3VAdapter(model, tokenizer, remote.processor, name="phi3_5_vision")
    adapter.chat = CHAT
    return adapter
