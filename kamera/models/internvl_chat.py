"""InternVL-Chat-V1.1 (``OpenGVLab/InternVL-Chat-V1-1``, remote code ``internvl_chat``) on native transformers classes.

The Hub checkpoint's own tensors load into a native ``InternVLVisionModel`` (InternViT-6B: 3200 wide, 25 heads
of 128, RMSNorm with q/k RMSNorm over the whole width, layer scale, no final norm) cut after the layer the
model reads, the two-layer MLP projector ``mlp1``, and a native ``LlamaForCausalLM`` (MHA: 40 heads × 128,
cache K | V per head, 1-D RoPE θ 10,000, context 4,096). Nothing of the remote code runs.

Where each choice comes from (read, not copied; facts restated in ``docs/remote_models.md``), all in
github.com/OpenGVLab/InternVL ``internvl_chat/internvl/``:
- InternViT: ``model/internvl_chat/modeling_intern_vit.py`` and ``configuration_intern_vit.py``: a fused
  ``attn.qkv`` (rows q | k | v, bias per ``qkv_bias``), ``q_norm`` / ``k_norm`` RMSNorms over all heads at
  ``layer_norm_eps`` before the heads split, ``norm1`` / ``norm2`` of ``norm_type``, layer scales ``ls1`` / ``ls2``,
  GELU MLP ``fc1`` / ``fc2``, a CLS ``class_embedding`` and ``position_embedding`` of the 448-px grid (resampled
  bicubically to the patch grid: the identity at 448 px, so the native embedding adds it as stored), no norm after
  the last layer.
- features: ``model/internvl_chat/modeling_internvl_chat.py`` ``extract_feature``: ``hidden_states[select_layer]``
  (the V1.1 release, commit 9807c9f, reads ``hidden_states[-4]``: the output of layer 45 of 48), CLS dropped,
  32 × 32 patches pixel-shuffled by ``downsample_ratio`` 0.5 into 16 × 16 tokens of 4 · 3200 and projected by
  ``mlp1`` = LayerNorm(12800) → Linear(12800, 5120) → GELU → Linear(5120, 5120). ``pixel_shuffle`` with
  ``ps_version`` 'v1' (the default of ``configuration_internvl_chat.py``, and the only form at the V1.1 release)
  leaves the two spatial axes transposed; 'v2' swaps them back.
- image preprocessing: the release's ``serve/model_worker.py`` (commit 9807c9f): the image resized to 448 × 448
  (PIL bicubic), then ``CLIPImageProcessor`` with size and crop 448 and ImageNet mean / std, i.e. one 448-px
  tile (no dynamic tiling: ``dynamic_image_size`` came with V1.5), 256 tokens per image.
- token layout and chat: ``modeling_internvl_chat.py`` ``chat``: ``<img>`` + ``num_image_token`` ×
  ``<IMG_CONTEXT>`` + ``</img>``; ``conversation.py`` template ``internvl_zh``: an empty system message and
  sep2 ``' '``, then ``<human>: `` question ``' '`` ``<bot>:``, BOS from the tokenizer, ``</s>`` ends a turn.
- added tokens: ``train/internvl_chat_finetune.py`` adds ``<img> </img> <IMG_CONTEXT> <quad> </quad> <ref> </ref>
  <box> </box>`` in that order after the base vocabulary; the loader takes their ids from the checkpoint's own
  tokenizer (``image_ids``), checking only that each is one token inside the embedding.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers as tf
from PIL import Image
from torch import nn

from kamera.models.hub_checkpoint import (
    CheckpointMismatchError,
    Ignored,
    Load,
    WeightPlan,
    build_empty,
    open_remote,
)
from kamera.models.mha import MHAAdapter
from kamera.models.shaped.writer import published_json

HUB_CONFIG: dict = published_json("internvl_chat_v1_1")  # config.json as reconstructed (kamera/models/shaped/configs/)
# The release's CLIPImageProcessor (serve/model_worker.py at 9807c9f), as a preprocessor_config.json writes it.
HUB_PREPROCESSOR: dict = published_json("internvl_chat_v1_1", "preprocessor_config.json")
IMG_START, IMG_END, IMG_CONTEXT = "<img>", "</img>", "<IMG_CONTEXT>"
ADDED_TOKENS = (IMG_START, IMG_END, IMG_CONTEXT, "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>")
CHAT = ("<s> <human>: ", " <bot>:")
CHAT_TEMPLATE = (
    "{{ bos_token + ' ' }}{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}<human>: {% else -%}<bot>: {% endif -%}"
    "{%- if m['content'] is string -%}{{ m['content'] }}{%- else -%}{%- for p in m['content'] -%}"
    "{%- if p['type'] == 'image' -%}<img><IMG_CONTEXT></img>{{ '\\n' }}{%- else -%}{{ p['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}{%- if m['role'] == 'user' %} {% else -%}</s>{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt -%}<bot>:{%- endif -%}"
)
VISION, MLP = "vision_model.", "mlp1."
LLM = "language_model."
LLAMA_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "bos_token_id", "eos_token_id",
              "pad_token_id")


def _require(cfg: dict, where: str, key: str, want) -> None:
    if cfg.get(key, want) != want:
        raise CheckpointMismatchError(
            f"config.json {where}{key} = {cfg.get(key)!r}; the native mapping implements {want!r}"
        )


def _parts(hub: dict) -> tuple[dict, dict]:
    if hub.get("model_type") != "internvl_chat":
        raise CheckpointMismatchError(f"config.json has model_type {hub.get('model_type')!r}, expected 'internvl_chat'")
    llm, vis = hub.get("llm_config") or {}, hub.get("vision_config") or {}
    if (llm.get("architectures") or [None])[0] != "LlamaForCausalLM":
        raise CheckpointMismatchError(
            f"llm_config.architectures {llm.get('architectures')!r}; only LlamaForCausalLM is mapped"
        )
    return llm, vis


def image_size(hub: dict) -> int:
    """The tile side the tower reads: ``force_image_size``, else the vision config's ``image_size``."""
    return int(hub.get("force_image_size") or hub["vision_config"]["image_size"])


def read_layers(hub: dict, ckpt_layers: int) -> int:
    """InternViT layers the model reads: ``hidden_states[select_layer]`` is the output of that many layers.

    Without ``select_layer`` in config.json, −4: the default of V1.1's own config class (the release's
    ``configuration_internvl_chat.py``; later versions default to −1)."""
    sel = int(hub.get("select_layer", -4))
    used = sel % (ckpt_layers + 1)
    if not 1 <= used <= ckpt_layers:
        raise CheckpointMismatchError(f"config.json select_layer {sel} reads no InternViT layer of {ckpt_layers}")
    return used


def native_text_config(hub: dict) -> tf.LlamaConfig:
    """The native Llama config of ``llm_config`` (plain RoPE, untied head, no biases)."""
    llm, _ = _parts(hub)
    for key, want in (("hidden_act", "silu"), ("rope_scaling", None), ("attention_bias", False), ("mlp_bias", False)):
        _require(llm, "llm_config.", key, want)
    missing = [k for k in (*LLAMA_KEYS, "rope_theta") if k not in llm]
    if missing:
        raise CheckpointMismatchError(f"config.json llm_config lacks {missing}")
    return tf.LlamaConfig(
        **{k: llm[k] for k in LLAMA_KEYS},
        hidden_act="silu",
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": float(llm["rope_theta"])},
    )


def native_vision_config(hub: dict, used: int) -> tf.InternVLVisionConfig:
    """The native InternViT config of ``vision_config``, cut after the ``used`` layers the model reads.

    The native q/k norms are RMSNorms at eps 1e-6 whatever the config says, so another ``layer_norm_eps``
    with ``qk_normalization`` is refused; no final norm (``use_mean_pooling`` makes it the identity)."""
    _, vis = _parts(hub)
    _require(vis, "vision_config.", "hidden_act", "gelu")
    if vis.get("qk_normalization", True) and vis.get("layer_norm_eps", 1e-6) != 1e-6:
        raise CheckpointMismatchError(
            "config.json vision_config.layer_norm_eps must be 1e-6 with qk_normalization (the native q/k RMSNorm eps)"
        )
    if vis.get("norm_type", "rms_norm") not in ("rms_norm", "layer_norm"):
        raise CheckpointMismatchError(f"config.json vision_config.norm_type {vis['norm_type']!r}")
    side = image_size(hub)
    return tf.InternVLVisionConfig(
        hidden_size=vis["hidden_size"],
        intermediate_size=vis["intermediate_size"],
        num_attention_heads=vis["num_attention_heads"],
        num_hidden_layers=used,
        image_size=[side, side],
        patch_size=[vis["patch_size"]] * 2,
        num_channels=vis.get("num_channels", 3),
        attention_bias=bool(vis.get("qkv_bias", False)),
        use_qk_norm=bool(vis.get("qk_normalization", True)),
        norm_type=vis.get("norm_type", "rms_norm"),
        layer_norm_eps=vis.get("layer_norm_eps", 1e-6),
        hidden_act="gelu",
        layer_scale_init_value=vis.get("initializer_factor", 0.1),
        use_mean_pooling=True,
        use_absolute_position_embeddings=True,
    )


def native_config(hub: dict) -> tf.InternVLConfig:
    """The whole model as a native InternVL config (what the cost model reads: towers, widths, pixel shuffle)."""
    used = read_layers(hub, hub["vision_config"]["num_hidden_layers"])
    text = native_text_config(hub).to_dict() | {"model_type": "llama"}
    context = text["vocab_size"] - len(ADDED_TOKENS) + ADDED_TOKENS.index(IMG_CONTEXT)  # the training code's order
    return tf.InternVLConfig(
        vision_config=native_vision_config(hub, used).to_dict(),
        text_config=text,
        downsample_ratio=hub["downsample_ratio"],
        image_token_id=context,
        tie_word_embeddings=False,
    )


# ----- the native model ----------------------------------------------------------------------------------
class InternVLChatModel(nn.Module):
    """InternVL-Chat as native parts: ``language_model`` (LlamaForCausalLM), ``vision_model`` (InternVLVisionModel up
    to the read layer) and ``mlp1`` (LayerNorm → Linear → GELU → Linear, the remote code's own names)."""

    def __init__(
        self,
        language_model: tf.LlamaForCausalLM,
        vision_model: tf.InternVLVisionModel,
        downsample_ratio: float,
        ps_version: str,
    ) -> None:
        super().__init__()
        if ps_version not in ("v1", "v2"):
            raise CheckpointMismatchError(f"config.json ps_version {ps_version!r}; expected 'v1' or 'v2'")
        self.language_model = language_model
        self.vision_model = vision_model
        self.config = language_model.config
        self.downsample_ratio, self.ps_version = downsample_ratio, ps_version
        d, h = vision_model.config.hidden_size * round(1 / downsample_ratio) ** 2, self.config.hidden_size
        p = next(language_model.parameters())
        self.mlp1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, h), nn.GELU(), nn.Linear(h, h)).to(p.device, p.dtype)

    def get_output_embeddings(self) -> nn.Module:
        return self.language_model.lm_head

    def image_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[tiles, 3, 448, 448] → [tiles · 256, hidden]: the read layer's patches, pixel-shuffled, projected."""
        x = self.vision_model(pixel_values=pixel_values).last_hidden_state[:, 1:]  # CLS dropped
        side = math.isqrt(x.shape[1])
        grid = pixel_shuffle(x.reshape(x.shape[0], side, side, -1), self.downsample_ratio, self.ps_version)
        return self.mlp1(grid.reshape(-1, grid.shape[-1]))


def pixel_shuffle(x: torch.Tensor, ratio: float, ps_version: str) -> torch.Tensor:
    """[n, w, h, c] → [n, h·r, w·r, c / r²] as ``InternVLChatModel.pixel_shuffle``: pairs of columns, then of rows,
    folded into channels; 'v1' keeps the result transposed (rows and columns swapped), 'v2' swaps them back."""
    n, w, h, c = x.shape
    x = x.reshape(n, w, int(h * ratio), int(c / ratio)).permute(0, 2, 1, 3)
    x = x.reshape(n, int(h * ratio), int(w * ratio), int(c / (ratio * ratio)))
    return x if ps_version == "v1" else x.permute(0, 2, 1, 3)


@dataclass(frozen=True)
class TileImageProcessor:
    """V1.1's preprocessing: one ``size``-px tile, PIL bicubic resize, then mean / std
    (sources in the module docstring).

    After the square resize the CLIP processor's shortest-edge resize and centre crop are no-ops."""

    size: int = 448
    image_mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    image_std: tuple[float, float, float] = (0.229, 0.224, 0.225)

    @classmethod
    def from_dict(cls, cfg: dict) -> TileImageProcessor:
        try:
            size = cfg["crop_size"]
            size = size["height"] if isinstance(size, dict) else size
            return cls(int(size), tuple(cfg["image_mean"]), tuple(cfg["image_std"]))
        except (KeyError, TypeError, ValueError) as err:
            raise CheckpointMismatchError(f"preprocessor_config.json lacks or mistypes {err}") from err

    def __call__(self, image: Image.Image) -> torch.Tensor:
        """Pixels [1, 3, size, size], float32."""
        img = image.convert("RGB").resize((self.size, self.size), Image.Resampling.BICUBIC)
        arr = (np.asarray(img, dtype=np.float32) / 255.0 - np.asarray(self.image_mean, np.float32)) / np.asarray(
            self.image_std, np.float32
        )
        return torch.from_numpy(arr).permute(2, 0, 1)[None].contiguous()


# ----- the adapter ---------------------------------------------------------------------------------------
class InternVLChatAdapter(MHAAdapter):
    """InternVL-Chat-V1.1: MHA cache (K | V, 40 heads × 128),
    ``<img>`` + 256 ``<IMG_CONTEXT>`` + ``</img>`` per image."""

    family = "internvl_chat"
    image_ids: tuple[int, int, int] = (0, 0, 0)  # <img>, <IMG_CONTEXT>, </img> in the checkpoint's tokenizer

    def _language_model(self) -> nn.Module:
        return self.model.language_model.model

    def _pixels(self, image: Image.Image) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.image_processor(image).to(self.dtype)}

    def _features(self, pixels: dict[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        return self.model.image_features(pixels["pixel_values"]), None

    def _image_ids(self, n: int, pixels: dict[str, torch.Tensor]) -> tuple[list[int], list[bool]]:
        start, context, end = self.image_ids
        return [start, *[context] * n, end], [False, *[True] * n, False]


# ----- names and the plan --------------------------------------------------------------------------------
def hub_tensor_shapes(hub: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of an InternVL-Chat (Llama) checkpoint with this config, in save order, with its shape."""
    llm, vis = _parts(hub)
    h, i, v = llm["hidden_size"], llm["intermediate_size"], llm["vocab_size"]
    heads, kv = llm["num_attention_heads"], llm["num_key_value_heads"]
    hd = h // heads
    out: list[tuple[str, tuple[int, ...]]] = [(LLM + "model.embed_tokens.weight", (v, h))]
    for layer in range(llm["num_hidden_layers"]):
        p = f"{LLM}model.layers.{layer}."
        out += [
            (p + "self_attn.q_proj.weight", (heads * hd, h)),
            (p + "self_attn.k_proj.weight", (kv * hd, h)),
            (p + "self_attn.v_proj.weight", (kv * hd, h)),
            (p + "self_attn.o_proj.weight", (h, heads * hd)),
            (p + "mlp.gate_proj.weight", (i, h)),
            (p + "mlp.up_proj.weight", (i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    out += [(LLM + "model.norm.weight", (h,)), (LLM + "lm_head.weight", (v, h))]
    c, ci, ps = vis["hidden_size"], vis["intermediate_size"], vis["patch_size"]
    grid = (image_size(hub) // ps) ** 2
    e = VISION + "embeddings."
    out += [
        (e + "class_embedding", (1, 1, c)),
        (e + "patch_embedding.weight", (c, vis.get("num_channels", 3), ps, ps)),
        (e + "patch_embedding.bias", (c,)),
        (e + "position_embedding", (1, grid + 1, c)),
    ]
    norms = ("weight",) if vis.get("norm_type", "rms_norm") == "rms_norm" else ("weight", "bias")
    for layer in range(vis["num_hidden_layers"]):
        p = f"{VISION}encoder.layers.{layer}."
        out += [(p + "attn.qkv.weight", (3 * c, c))] + (
            [(p + "attn.qkv.bias", (3 * c,))] if vis.get("qkv_bias") else []
        )
        if vis.get("qk_normalization", True):
            out += [(p + "attn.q_norm.weight", (c,)), (p + "attn.k_norm.weight", (c,))]
        out += [
            (p + "attn.proj.weight", (c, c)),
            (p + "attn.proj.bias", (c,)),
            (p + "mlp.fc1.weight", (ci, c)),
            (p + "mlp.fc1.bias", (ci,)),
            (p + "mlp.fc2.weight", (c, ci)),
            (p + "mlp.fc2.bias", (c,)),
        ]
        out += [(f"{p}{n}.{k}", (c,)) for n in ("norm1", "norm2") for k in norms]
        out += [(p + "ls1", (c,)), (p + "ls2", (c,))]
    d = c * round(1 / hub["downsample_ratio"]) ** 2
    out += [
        (MLP + "0.weight", (d,)),
        (MLP + "0.bias", (d,)),
        (MLP + "1.weight", (h, d)),
        (MLP + "1.bias", (h,)),
        (MLP + "3.weight", (h, h)),
        (MLP + "3.bias", (h,)),
    ]
    return out


VISION_RENAMES = {
    "attn.proj": "attention.projection_layer",
    "attn.q_norm": "attention.q_norm",
    "attn.k_norm": "attention.k_norm",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
    "norm1": "layernorm_before",
    "norm2": "layernorm_after",
}
EMBEDDING_RENAMES = {
    "class_embedding": "cls_token",
    "position_embedding": "position_embeddings",
    "patch_embedding.weight": "patch_embeddings.projection.weight",
    "patch_embedding.bias": "patch_embeddings.projection.bias",
}


def _vision_load(name: str) -> list[Load]:
    """The native tensors of one InternViT checkpoint tensor (``qkv`` split into q, k, v rows)."""
    rest = name[len(VISION) :]
    if rest.startswith("embeddings."):
        return [Load.copy(VISION + "embeddings." + EMBEDDING_RENAMES[rest[len("embeddings.") :]], name)]
    m = re.fullmatch(r"encoder\.layers\.(\d+)\.(.+)\.(weight|bias)|encoder\.layers\.(\d+)\.(ls[12])", rest)
    if m is None:
        raise CheckpointMismatchError(f"no native InternViT tensor for {name!r}")
    if m.group(5):
        return [Load.copy(f"{VISION}encoder.layer.{m.group(4)}.lambda_{m.group(5)[-1]}", name)]
    layer, module, kind = m.group(1), m.group(2), m.group(3)
    q = f"{VISION}encoder.layer.{layer}."
    if module == "attn.qkv":
        return [
            Load.copy(f"{q}attention.{proj}.{kind}", name, lambda x, k=k: x.chunk(3)[k])  # rows q | k | v
            for k, proj in enumerate(("q_proj", "k_proj", "v_proj"))
        ]
    return [Load.copy(f"{q}{VISION_RENAMES[module]}.{kind}", name)]


def weight_plan(hub: dict, used: int) -> WeightPlan:
    """Every native tensor with its checkpoint source; InternViT layers after the read one are ignored."""
    vis = hub["vision_config"]
    depth = vis["num_hidden_layers"]
    loads: list[Load] = []
    for name, _ in hub_tensor_shapes(hub | {"vision_config": vis | {"num_hidden_layers": used}}):
        loads += _vision_load(name) if name.startswith(VISION) else [Load.copy(name, name)]
    ignored = [
        Ignored(
            r"language_model\.model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq",
            "a buffer the native rotary embedding recomputes from rope_theta",
        )
    ]
    if used < depth:
        unread = "|".join(str(k) for k in range(used, depth))
        ignored.append(
            Ignored(
                rf"vision_model\.encoder\.layers\.({unread})\..+",
                f"after hidden_states[select_layer]: the model reads the output of layer {used - 1}",
            )
        )
    return WeightPlan(loads, ignored)


def image_ids(tokenizer, vocab_size: int, path: Path) -> tuple[int, int, int]:
    """``<img>``, ``<IMG_CONTEXT>``, ``</img>`` ids of the checkpoint's tokenizer:
    each one token inside the embedding."""
    ids = []
    for token in (IMG_START, IMG_CONTEXT, IMG_END):
        got = tokenizer.convert_tokens_to_ids(token)
        if not isinstance(got, int) or got == tokenizer.unk_token_id or not 0 <= got < vocab_size:
            raise CheckpointMismatchError(
                f"{path}: the tokenizer has no token {token} inside the {vocab_size}-row embedding"
            )
        ids.append(got)
    return ids[0], ids[1], ids[2]


def _tokenizer(path: Path):
    """tokenizer.json when present (no remote code named), else the sentencepiece files through LlamaTokenizer."""
    if (path / "tokenizer.json").is_file():
        return tf.PreTrainedTokenizerFast.from_pretrained(path)
    return tf.LlamaTokenizer.from_pretrained(path)


def _check_tile(path: Path, hub: dict, processor: TileImageProcessor) -> None:
    """The preprocessor's tile must be the side the tower reads."""
    if processor.size != image_size(hub):
        raise CheckpointMismatchError(
            f"{path}: preprocessor crop_size {processor.size} is not the tower's {image_size(hub)} px"
        )


def load_internvl_chat_v1_1(
    path: Path, *, dtype: torch.dtype, device: str, attn_implementation: str
) -> InternVLChatAdapter:
    """Load an InternVL-Chat-V1.1 checkpoint directory (Hub layout) into native modules; no remote code runs."""
    remote = open_remote(path, native_text_config, TileImageProcessor, _check_tile)
    hub = remote.hub
    used = read_layers(hub, hub["vision_config"]["num_hidden_layers"])
    plan = weight_plan(hub, used)
    tokenizer = _tokenizer(remote.path)
    ids = image_ids(tokenizer, remote.config.vocab_size, remote.path)
    model = remote.load(
        lambda: InternVLChatModel(
            build_empty(tf.LlamaForCausalLM, remote.config, dtype, attn_implementation),
            build_empty(tf.InternVLVisionModel, native_vision_config(hub, used), dtype, attn_implementation),
            float(hub["downsample_ratio"]),
            str(hub.get("ps_version", "v1")),
        ),
        plan,
        device,
    )
    adapter = InternVLChatAdapter(model, tokenizer, remote.processor, name="internvl_chat_v1_1")
    adapter.image_ids = ids
    adapter.chat = CHAT
    return adapter
