"""Kimi-VL-A3B (``moonshotai/Kimi-VL-A3B-Instruct``, model_type ``kimi_vl``) on native transformers classes.

The Hub checkpoint runs only as remote code, whose DeepSeek-V3 attention caches expanded per-head
K/V. Here its own safetensors load, name by name, into the native ``kimi_k25`` model (MoonViT-style
tower + projector + the native ``deepseek_v3`` decoder), whose MLA cache holds what the paper
patches: c_KV (512, after ``kv_a_layernorm``) and the roped k_pe (64, rotate-half layout).

Where each choice comes from (read, not copied; facts restated in ``docs/remote_models.md``):
- config.json and the 5,679 tensor names: the published checkpoint at Hub revision 398eede0, as
  recorded in github.com/joshuahickscorp/hawking ``receipts/headless/ARCHITECTURE_RECOGNIZER_FIXTURES.json``.
- MoonViT: vLLM ``vllm/model_executor/models/moonvit.py``. Its 2-D RoPE multiplies complex pairs
  (x[2j], x[2j+1]) by cis(w·θ_i) for j = 2i and cis(h·θ_i) for j = 2i + 1, θ_i = 10000^(−4i/d); the native
  kimi_k25 tower rotates (x[j], x[j + d/2]) by the same angle sequence (w·θ_0, h·θ_0, w·θ_1, …), so
  the two agree once the q and k rows of ``wqkv`` are de-interleaved per head (``deinterleave``).
  ``wqkv`` is q | k | v (rows), LayerNorms use eps 1e-5, the MLP gelu-tanh, ``patch_merger`` groups
  2×2 patches in (row, col) order: all as the native ``Kimi_K25VisionModel``.
- projector: vLLM ``vllm/model_executor/models/kimi_vl.py`` ``KimiVLMultiModalProjector`` (LayerNorm over
  1152 per patch, eps 1e-5, then linear_1 → exact GELU → linear_2): the native ``mm_projector``.
- decoder: the remote code's DeepSeek-V3 layers (interleaved rope weights, ``noaux_tc`` sigmoid router,
  shared experts) are the native ``deepseek_v3`` ones with ``rope_interleave=True``.
- image preprocessing: vLLM ``kimi_vl.py`` ``get_num_image_tokens`` and mlx-vlm
  ``mlx_vlm/models/kimi_vl/processing_kimi_vl.py``: above ``in_token_limit`` patches an image is resized
  (bicubic) by √(limit / patches); with ``pad_input`` it is zero-padded bottom/right to a multiple of
  patch × merge; scaled to [0, 1], normalised, cut into raster-order 14×14 patches.
- token layout: vLLM ``kimi_vl.py`` ``get_placeholder_str``: ``<|media_start|>image<|media_content|>``,
  one ``<|media_pad|>`` per merged patch, ``<|media_end|>``; ids from SGLang
  ``python/sglang/srt/managers/multimodal_processors/kimi_vl.py`` (163602–163605) and config.json.
- chat: vLLM ``examples/offline_inference/vision_language.py`` ``run_kimi_vl``:
  ``<|im_user|>user<|im_middle|>…<|im_end|><|im_assistant|>assistant<|im_middle|>``; chat-token ids
  from the Moonshot tokenizer's special-token table (163584–163601, e.g. torchtune/vLLM Kimi tokenizer tables).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers as tf
from PIL import Image
from safetensors import safe_open

from kamera.models.hub_checkpoint import (
    CheckpointMismatchError,
    HubCheckpoint,
    Ignored,
    Load,
    WeightPlan,
    build_empty,
    check_specials,
    open_remote,
    read_json,
)
from kamera.models.mla import KimiK25Adapter
from kamera.models.shaped.writer import published_json

# ----- the published checkpoint ------------------------------------------------------------------------
HUB_CONFIG: dict = published_json("kimi_vl_a3b")  # the published config.json (kamera/models/shaped/configs/)
HUB_TENSOR_COUNT = 5679  # tensors in the published checkpoint (27 + 27 layers)

# The published preprocessor_config.json: in_token_limit, patch and merge size, pad_input (as recorded for
# kimi-vl-a3b-instruct rows of a public eval harness); mean/std are read from the file at load time.
# The shaped checkpoint writes 0.5 / 0.5, the MoonViT family's normalisation (transformers' kimi_k25 processor).
HUB_PREPROCESSOR: dict = published_json("kimi_vl_a3b", "preprocessor_config.json")

MEDIA_START, MEDIA_CONTENT, MEDIA_END, MEDIA_PAD = (
    "<|media_start|>",
    "<|media_content|>",
    "<|media_end|>",
    "<|media_pad|>",
)
SPECIALS: dict[str, int] = {
    "[BOS]": 163584,
    "[EOS]": 163585,
    "<|im_end|>": 163586,
    "<|im_user|>": 163587,
    "<|im_assistant|>": 163588,
    "<|start_header_id|>": 163590,
    "<|end_header_id|>": 163591,
    "[EOT]": 163593,
    "<|im_system|>": 163594,
    "<|im_middle|>": 163601,
    MEDIA_START: 163602,
    MEDIA_CONTENT: 163603,
    MEDIA_END: 163604,
    MEDIA_PAD: 163605,
    "[UNK]": 163838,
    "[PAD]": 163839,
}
RESERVED = range(163584, 163840)  # the tokenizer's 256-id special block; unnamed ids are reserved tokens
CHAT_TOKENS = ("<|im_user|>", "<|im_middle|>", "<|im_end|>", "<|im_assistant|>")
CHAT = ("<|im_user|>user<|im_middle|>", "<|im_end|><|im_assistant|>assistant<|im_middle|>")
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif m['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
    "{%- if m['content'] is string -%}{{ m['content'] }}{%- else -%}{%- for p in m['content'] -%}"
    "{%- if p['type'] == 'image' -%}<|media_start|>image<|media_content|><|media_pad|><|media_end|>"
    "{%- else -%}{{ p['text'] }}{%- endif -%}{%- endfor -%}{%- endif -%}<|im_end|>"
    "{%- endfor -%}{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)

TEXT_KEYS = (
    "vocab_size",
    "max_position_embeddings",
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "n_shared_experts",
    "n_routed_experts",
    "routed_scaling_factor",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "v_head_dim",
    "qk_nope_head_dim",
    "n_group",
    "topk_group",
    "num_experts_per_tok",
    "first_k_dense_replace",
    "norm_topk_prob",
    "hidden_act",
    "rms_norm_eps",
    "attention_bias",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
)
# config values the native classes implement; anything else would load but compute something different
REQUIRED_TEXT = {
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "moe_layer_freq": 1,
    "rope_scaling": None,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def native_config(hub: dict) -> tf.Kimi_K25Config:
    """The native kimi_k25 config of a Kimi-VL config.json; a field the native classes do not implement raises."""
    if hub.get("model_type") != "kimi_vl":
        raise CheckpointMismatchError(f"config.json has model_type {hub.get('model_type')!r}, expected 'kimi_vl'")
    text, vis = hub.get("text_config") or {}, hub.get("vision_config") or {}
    if vis.get("model_type") != "moonvit":
        raise CheckpointMismatchError(f"vision_config.model_type is {vis.get('model_type')!r}, expected 'moonvit'")
    for key, want in REQUIRED_TEXT.items():
        if text.get(key, want) != want:
            raise CheckpointMismatchError(f"text_config.{key} = {text[key]!r}; the native mapping implements {want!r}")
    missing = [k for k in (*TEXT_KEYS, "rope_theta") if k not in text]
    if missing:
        raise CheckpointMismatchError(f"text_config lacks {missing}")
    text_cfg = {k: text[k] for k in TEXT_KEYS} | {
        "model_type": "deepseek_v3",
        "rope_interleave": True,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(text["rope_theta"])},
    }
    vis_cfg = {
        "patch_size": vis["patch_size"],
        "pos_emb_height": vis["init_pos_emb_height"],
        "pos_emb_width": vis["init_pos_emb_width"],
        "num_attention_heads": vis["num_attention_heads"],
        "num_hidden_layers": vis["num_hidden_layers"],
        "hidden_size": vis["hidden_size"],
        "intermediate_size": vis["intermediate_size"],
        "merge_kernel_size": list(vis["merge_kernel_size"]),
        "hidden_act": "gelu_pytorch_tanh",
        "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
    }
    return tf.Kimi_K25Config(
        text_config=text_cfg,
        vision_config=vis_cfg,
        projection_hidden_size=vis["hidden_size"],
        projection_layer_norm_eps=1e-5,
        image_token_id=hub["media_placeholder_token_id"],
        vision_start_token_id=SPECIALS[MEDIA_START],
        vision_end_token_id=SPECIALS[MEDIA_END],
        tie_word_embeddings=False,
    )


# ----- names ---------------------------------------------------------------------------------------------
def hub_tensor_shapes(hub: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of a Kimi-VL checkpoint with this config, in save order, with its shape."""
    t, v = hub["text_config"], hub["vision_config"]
    h, heads = t["hidden_size"], t["num_attention_heads"]
    qk = t["qk_nope_head_dim"] + t["qk_rope_head_dim"]
    out: list[tuple[str, tuple[int, ...]]] = [("language_model.model.embed_tokens.weight", (t["vocab_size"], h))]
    for layer in range(t["num_hidden_layers"]):
        p = f"language_model.model.layers.{layer}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
        if t["q_lora_rank"] is None:
            out.append((p + "self_attn.q_proj.weight", (heads * qk, h)))
        else:
            r = t["q_lora_rank"]
            out += [
                (p + "self_attn.q_a_proj.weight", (r, h)),
                (p + "self_attn.q_a_layernorm.weight", (r,)),
                (p + "self_attn.q_b_proj.weight", (heads * qk, r)),
            ]
        out += [
            (p + "self_attn.kv_a_proj_with_mqa.weight", (t["kv_lora_rank"] + t["qk_rope_head_dim"], h)),
            (p + "self_attn.kv_a_layernorm.weight", (t["kv_lora_rank"],)),
            (p + "self_attn.kv_b_proj.weight", (heads * (t["qk_nope_head_dim"] + t["v_head_dim"]), t["kv_lora_rank"])),
            (p + "self_attn.o_proj.weight", (h, heads * t["v_head_dim"])),
            (p + "self_attn.rotary_emb.inv_freq", (t["qk_rope_head_dim"] // 2,)),
        ]
        if layer < t["first_k_dense_replace"]:
            i = t["intermediate_size"]
            out += [
                (p + "mlp.gate_proj.weight", (i, h)),
                (p + "mlp.up_proj.weight", (i, h)),
                (p + "mlp.down_proj.weight", (h, i)),
            ]
            continue
        i, s = t["moe_intermediate_size"], t["moe_intermediate_size"] * t["n_shared_experts"]
        for e in range(t["n_routed_experts"]):
            q = f"{p}mlp.experts.{e}."
            out += [(q + "gate_proj.weight", (i, h)), (q + "up_proj.weight", (i, h)), (q + "down_proj.weight", (h, i))]
        out += [
            (p + "mlp.gate.weight", (t["n_routed_experts"], h)),
            (p + "mlp.gate.e_score_correction_bias", (t["n_routed_experts"],)),
            (p + "mlp.shared_experts.gate_proj.weight", (s, h)),
            (p + "mlp.shared_experts.up_proj.weight", (s, h)),
            (p + "mlp.shared_experts.down_proj.weight", (h, s)),
        ]
    out += [("language_model.model.norm.weight", (h,)), ("language_model.lm_head.weight", (t["vocab_size"], h))]
    d, kh, kw = v["hidden_size"], *v["merge_kernel_size"]
    merged = d * kh * kw
    out += [
        ("multi_modal_projector.pre_norm.weight", (d,)),
        ("multi_modal_projector.pre_norm.bias", (d,)),
        ("multi_modal_projector.linear_1.weight", (merged, merged)),
        ("multi_modal_projector.linear_1.bias", (merged,)),
        ("multi_modal_projector.linear_2.weight", (h, merged)),
        ("multi_modal_projector.linear_2.bias", (h,)),
    ]
    for layer in range(v["num_hidden_layers"]):
        p = f"vision_tower.encoder.blocks.{layer}."
        out += [
            (p + "norm0.weight", (d,)),
            (p + "norm0.bias", (d,)),
            (p + "norm1.weight", (d,)),
            (p + "norm1.bias", (d,)),
            (p + "wqkv.weight", (3 * d, d)),
            (p + "wqkv.bias", (3 * d,)),
            (p + "wo.weight", (d, d)),
            (p + "wo.bias", (d,)),
            (p + "mlp.fc0.weight", (v["intermediate_size"], d)),
            (p + "mlp.fc0.bias", (v["intermediate_size"],)),
            (p + "mlp.fc1.weight", (d, v["intermediate_size"])),
            (p + "mlp.fc1.bias", (d,)),
        ]
    ps = v["patch_size"]
    out += [
        ("vision_tower.encoder.final_layernorm.weight", (d,)),
        ("vision_tower.encoder.final_layernorm.bias", (d,)),
        ("vision_tower.patch_embed.pos_emb.weight", (v["init_pos_emb_height"], v["init_pos_emb_width"], d)),
        ("vision_tower.patch_embed.proj.weight", (d, 3, ps, ps)),
        ("vision_tower.patch_embed.proj.bias", (d,)),
    ]
    return out


def deinterleave(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """Per head, the complex-pair row order (x0, x1), (x2, x3), … → the rotate-half order (x0, x2, …, x1, x3, …).

    ``rows`` is a [heads·head_dim, …] weight or [heads·head_dim] bias of q or k."""
    hd = rows.shape[0] // heads
    return rows.reshape(heads, hd // 2, 2, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)


def weight_plan(hub: dict) -> WeightPlan:
    """Every native kimi_k25 tensor with the Kimi-VL checkpoint tensors it is made of."""
    t, v = hub["text_config"], hub["vision_config"]
    loads: list[Load] = []
    src, dst = "language_model.model.", "model.language_model."
    for name, _ in hub_tensor_shapes(hub):
        if not name.startswith(src) or ".mlp.experts." in name or name.endswith("inv_freq"):
            continue
        loads.append(Load.copy(dst + name[len(src) :], name))
    for layer in range(t["first_k_dense_replace"], t["num_hidden_layers"]):
        p = f"{src}layers.{layer}.mlp.experts."
        experts = range(t["n_routed_experts"])
        loads.append(
            Load(
                f"{dst}layers.{layer}.mlp.experts.gate_up_proj",
                tuple((f"{p}{e}.gate_proj.weight", f"{p}{e}.up_proj.weight") for e in experts),
            )
        )
        loads.append(
            Load(f"{dst}layers.{layer}.mlp.experts.down_proj", tuple((f"{p}{e}.down_proj.weight",) for e in experts))
        )
    loads.append(Load.copy("lm_head.weight", "language_model.lm_head.weight"))
    for name in ("pre_norm.weight", "pre_norm.bias"):
        loads.append(Load.copy(f"model.mm_projector.{name}", f"multi_modal_projector.{name}"))
    for ours, theirs in (("in_proj", "linear_1"), ("out_proj", "linear_2")):
        for kind in ("weight", "bias"):
            loads.append(Load.copy(f"model.mm_projector.{ours}.{kind}", f"multi_modal_projector.{theirs}.{kind}"))
    d, heads = v["hidden_size"], v["num_attention_heads"]
    renames = {"norm0": "norm1", "norm1": "norm2", "mlp.fc0": "mlp.fc1", "mlp.fc1": "mlp.fc2", "wo": "attn.proj"}
    for layer in range(v["num_hidden_layers"]):
        p, q = f"vision_tower.encoder.blocks.{layer}.", f"model.vision_tower.layers.{layer}."
        for theirs, ours in renames.items():
            for kind in ("weight", "bias"):
                loads.append(Load.copy(f"{q}{ours}.{kind}", f"{p}{theirs}.{kind}"))
        for k, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            for kind in ("weight", "bias"):

                def part(x: torch.Tensor, k: int = k) -> torch.Tensor:
                    rows = x[k * d : (k + 1) * d]
                    return rows if k == 2 else deinterleave(rows, heads)

                loads.append(Load.copy(f"{q}attn.{proj}.{kind}", f"{p}wqkv.{kind}", part))
    loads += [
        Load.copy("model.vision_tower.final_layernorm.weight", "vision_tower.encoder.final_layernorm.weight"),
        Load.copy("model.vision_tower.final_layernorm.bias", "vision_tower.encoder.final_layernorm.bias"),
        Load.copy(
            "model.vision_tower.patch_embed.pos_emb.position_embeddings", "vision_tower.patch_embed.pos_emb.weight"
        ),
        Load.copy("model.vision_tower.patch_embed.proj.weight", "vision_tower.patch_embed.proj.weight"),
        Load.copy("model.vision_tower.patch_embed.proj.bias", "vision_tower.patch_embed.proj.bias"),
    ]
    ignored = [
        Ignored(
            r"language_model\.model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq",
            "a buffer the native rotary embedding recomputes from rope_theta; checked equal at load",
        )
    ]
    return WeightPlan(loads, ignored)


# ----- images --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MoonViTImageProcessor:
    """Kimi-VL's image preprocessing from its preprocessor_config.json (sources in the module docstring)."""

    patch_size: int = 14
    merge_kernel_size: tuple[int, int] = (2, 2)
    in_token_limit: int = 4096
    pad_input: bool = True
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    @classmethod
    def from_dict(cls, cfg: dict) -> MoonViTImageProcessor:
        try:
            return cls(
                int(cfg["patch_size"]),
                tuple(int(k) for k in cfg["merge_kernel_size"]),
                int(cfg["in_token_limit"]),
                bool(cfg.get("pad_input", True)),
                tuple(cfg["image_mean"]),
                tuple(cfg["image_std"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointMismatchError(f"preprocessor_config.json lacks or mistypes {err}") from err

    def rescale(self, image: Image.Image) -> Image.Image:
        """Shrink above the patch budget, then pad (or centre-crop) to a multiple of patch × merge."""
        p, (kh, kw) = self.patch_size, self.merge_kernel_size
        w, h = image.size
        if (w // p) * (h // p) > self.in_token_limit:
            scale = math.sqrt(self.in_token_limit / ((w // p) * (h // p)))
            image = image.resize((int(w * scale), int(h * scale)), Image.Resampling.BICUBIC)
            w, h = image.size
        sh, sw = kh * p, kw * p
        if self.pad_input:
            canvas = Image.new("RGB", (w + (-w) % sw, h + (-h) % sh), (0, 0, 0))
            canvas.paste(image, (0, 0))
            return canvas
        nw, nh = w - w % sw, h - h % sh
        if nw == 0 or nh == 0:
            raise ValueError(f"image {w}×{h} is smaller than one {sw}×{sh} merge block")
        left, top = (w - nw) // 2, (h - nh) // 2
        return image.crop((left, top, left + nw, top + nh))

    def __call__(self, image: Image.Image) -> tuple[torch.Tensor, tuple[int, int]]:
        """Patches [gh·gw, 3, p, p] (float32, raster order) and the patch grid (gh, gw)."""
        image = self.rescale(image.convert("RGB"))
        arr = (np.asarray(image, dtype=np.float32) / 255.0 - np.asarray(self.image_mean, np.float32)) / np.asarray(
            self.image_std, np.float32
        )
        p = self.patch_size
        gh, gw = arr.shape[0] // p, arr.shape[1] // p
        x = torch.from_numpy(arr).permute(2, 0, 1)
        return x.reshape(3, gh, p, gw, p).permute(1, 3, 0, 2, 4).reshape(gh * gw, 3, p, p).contiguous(), (gh, gw)

    def n_tokens(self, image: Image.Image) -> int:
        """Merged tokens (= ``<|media_pad|>`` count) an image becomes."""
        w, h = self.rescale(image.convert("RGB")).size
        p, (kh, kw) = self.patch_size, self.merge_kernel_size
        return (h // p // kh) * (w // p // kw)


# ----- the adapter ---------------------------------------------------------------------------------------
class KimiVLAdapter(KimiK25Adapter):
    """Kimi-VL-A3B on native kimi_k25 modules: MLA latent cache (c_KV 512 | k_pe 64, rotate-half)."""

    family = "kimi_vl"

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        patches, (gh, gw) = self.image_processor(image)
        return {"pixel_values": patches.to(self.dtype), "image_grid_thw": torch.tensor([[1, gh, gw]])}

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        head = [SPECIALS[MEDIA_START], *self.tokenize("image"), SPECIALS[MEDIA_CONTENT]]
        ids = [*head, *[self.model.config.image_token_id] * n, SPECIALS[MEDIA_END]]
        return ids, [False] * len(head) + [True] * n + [False]


def _tokenizer(path: Path):
    """The checkpoint's tokenizer. The Hub's TikToken tokenizer exists only as its own tokenizer code
    (``tokenization_moonshot.py``), the one piece of remote code this loads; a stand-in is a tokenizer.json."""
    if "auto_map" in read_json(path / "tokenizer_config.json"):
        return tf.AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    return tf.PreTrainedTokenizerFast.from_pretrained(path)


def load_kimi_vl_a3b(path: Path, *, dtype: torch.dtype, device: str, attn_implementation: str) -> KimiVLAdapter:
    """Load a Kimi-VL checkpoint directory (Hub layout) into native modules; no remote model code runs."""
    remote = open_remote(path, native_config, MoonViTImageProcessor)
    plan = weight_plan(remote.hub)
    tokenizer = _tokenizer(remote.path)
    check_specials(
        tokenizer,
        {k: SPECIALS[k] for k in (MEDIA_START, MEDIA_CONTENT, MEDIA_END, MEDIA_PAD, *CHAT_TOKENS)},
        remote.path,
    )
    model = remote.load(
        lambda: build_empty(tf.Kimi_K25ForConditionalGeneration, remote.config, dtype, attn_implementation),
        plan,
        device,
    )
    _check_inv_freq(remote.ckpt, model)
    adapter = KimiVLAdapter(model, tokenizer, remote.processor, name="kimi_vl_a3b")
    adapter.chat = CHAT
    return adapter


def _check_inv_freq(ckpt: HubCheckpoint, model) -> None:
    """The checkpoint's stored rotary inv_freq must be what rope_theta gives the native rotary (bf16-stored)."""
    name = "language_model.model.layers.0.self_attn.rotary_emb.inv_freq"
    if name not in ckpt.weight_map:  # optional: nothing stored, nothing to compare
        return
    with safe_open(str(ckpt.path / ckpt.weight_map[name]), "pt") as f:
        stored = f.get_tensor(name).float()
    ours = model.model.language_model.rotary_emb.inv_freq.float().cpu()
    if stored.shape != ours.shape or not torch.allclose(stored, ours, rtol=1e-2, atol=0):
        raise CheckpointMismatchError(f"{ckpt.path}: {name} is not the inv_freq of rope_theta in config.json")
