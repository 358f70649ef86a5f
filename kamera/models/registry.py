"""The model registry: tiny random twins of every family (CPU tests) and the paper's checkpoints.

Tiny models are built from the real transformers config classes (the same code path as the 7B
models) with widths chosen so rank sweeps up to 128 are meaningful: the content channel (K/V
width, or the MLA latent) is ≥ 128 wide. Paper models load from a local directory only:
``path=`` or ``$KAMERA_MODELS/<repo name>``; a missing checkpoint names the path tried and the
command that fetches it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers as tf

from kamera.models import extras
from kamera.models.base import Adapter
from kamera.models.kimi_vl import CHAT as KIMI_CHAT
from kamera.models.kimi_vl import KimiVLAdapter
from kamera.models.mha import DeepseekVLAdapter, LlavaAdapter
from kamera.models.mla import DeepseekV2Adapter, KimiK25Adapter
from kamera.models.phi3_v import CHAT as PHI3_CHAT
from kamera.models.phi3_v import Phi3VAdapter
from kamera.models.qwen_vl import Qwen3VLAdapter, Qwen3VLMoeAdapter, QwenVLAdapter
from kamera.models.tokenizer import ByteTokenizer

VOCAB = 512
IMAGE, VIDEO, VSTART, VEND = VOCAB - 1, VOCAB - 2, VOCAB - 3, VOCAB - 4
SPECIAL_IDS = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VSTART, vision_end_token_id=VEND)

# The shared tiny decoder: 4 layers, hidden 256, 4 heads of 64; GQA with 2 KV heads → width 128.
TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=8192,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
MHA_TEXT = {**TEXT, "num_key_value_heads": 4}  # width 256
MLA_TEXT = dict(
    TEXT,
    num_key_value_heads=4,
    kv_lora_rank=128,
    q_lora_rank=None,
    qk_rope_head_dim=32,
    qk_nope_head_dim=32,
    v_head_dim=64,
    moe_intermediate_size=128,
    n_shared_experts=1,
    n_routed_experts=4,
    num_experts_per_tok=2,
    first_k_dense_replace=1,
)
QWEN_VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=256)


class UnknownModelError(ValueError):
    """A model name the registry does not know."""


class CheckpointNotFoundError(FileNotFoundError):
    """A paper-scale checkpoint missing from the local models root."""


@dataclass(frozen=True)
class ModelEntry:
    """One registered model: its family adapter and either a tiny config or a Hugging Face id."""

    name: str
    family: str
    attention: str
    adapter: type[Adapter] | None
    model_class: str
    tiny_config: Callable[[], object] | None = None
    image_processor: Callable[[], object] | None = None
    hf_id: str | None = None
    remote_code: bool = False
    chat: tuple[str, str] | None = None
    notes: str = ""
    loader: str | None = None  # "module:function" building the adapter itself (shipped weights, or a checkpoint path)
    weights: str | None = None  # shipped weights, relative to the kamera package (fingerprinted into job hashes)
    shaped: str | None = None  # "module:function" writing a shaped checkpoint (real layout and dims, random weights)

    @property
    def kind(self) -> str:
        """"tiny" (random, from a config), "toy" (shipped trained weights) or "paper" (local checkpoint)."""
        if self.tiny_config is not None:
            return "tiny"
        return "paper" if self.hf_id is not None else "toy"


def _qwen25_config():
    return tf.Qwen2_5_VLConfig(
        text_config=dict(TEXT, rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[8, 12, 12])),
        vision_config=dict(QWEN_VISION, patch_size=14, window_size=56, fullatt_block_indexes=[1]),
        **SPECIAL_IDS,
    )


def _qwen3_text(**extra):
    rope = dict(rope_type="default", rope_theta=5e6, mrope_section=[12, 10, 10], mrope_interleaved=True)
    return dict(TEXT, head_dim=64, rope_parameters=rope, **extra)


QWEN3_VISION = dict(QWEN_VISION, patch_size=16, num_position_embeddings=256, deepstack_visual_indexes=[0, 1])


def _qwen3_config():
    return tf.Qwen3VLConfig(text_config=_qwen3_text(), vision_config=QWEN3_VISION, **SPECIAL_IDS)


def _qwen3_moe_config():
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, decoder_sparse_step=1)
    return tf.Qwen3VLMoeConfig(text_config=_qwen3_text(**moe), vision_config=QWEN3_VISION, **SPECIAL_IDS)


def _kimi_config():
    return tf.Kimi_K25Config(
        text_config=dict(MLA_TEXT, model_type="deepseek_v3", n_group=1, topk_group=1),
        vision_config=dict(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=2, pos_emb_height=16, pos_emb_width=16
        ),
        projection_hidden_size=64,
        **SPECIAL_IDS,
    )


def _deepseek_v2_config():
    return tf.DeepseekV2Config(**MLA_TEXT)


def _llava_config():
    return tf.LlavaConfig(
        text_config=dict(model_type="llama", **MHA_TEXT),
        vision_config=dict(
            model_type="clip_vision_model", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=2, image_size=56, patch_size=14, projection_dim=64,
        ),
        image_token_index=IMAGE,
        image_seq_length=16,
    )


def _deepseek_vl_config():
    return tf.DeepseekVLConfig(
        text_config=dict(model_type="llama", **MHA_TEXT),
        vision_config=dict(
            model_type="siglip_vision_model", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=2, image_size=56, patch_size=14,
        ),
        image_token_id=IMAGE,
    )


def _qwen_pixels(patch: int):
    side = patch * 2 * 4  # 4 × 4 merged tokens at most
    return lambda: tf.Qwen2VLImageProcessorPil(
        patch_size=patch, merge_size=2, temporal_patch_size=2, min_pixels=(patch * 2) ** 2, max_pixels=side * side
    )


def _clip_pixels():
    return tf.CLIPImageProcessorPil(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})


def _siglip_pixels():
    return tf.DeepseekVLImageProcessorPil(size={"height": 56, "width": 56})


QWEN_CHAT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")

MODELS: dict[str, ModelEntry] = {
    e.name: e
    for e in [
        # ----- tiny random twins (CPU) -----
        ModelEntry("tiny_qwen2_5_vl", "qwen2_5_vl", "GQA", QwenVLAdapter, "Qwen2_5_VLForConditionalGeneration",
                   _qwen25_config, _qwen_pixels(14)),
        ModelEntry("tiny_qwen3_vl", "qwen3_vl", "GQA", Qwen3VLAdapter, "Qwen3VLForConditionalGeneration",
                   _qwen3_config, _qwen_pixels(16)),
        ModelEntry("tiny_qwen3_vl_moe", "qwen3_vl_moe", "GQA", Qwen3VLMoeAdapter, "Qwen3VLMoeForConditionalGeneration",
                   _qwen3_moe_config, _qwen_pixels(16)),
        ModelEntry("tiny_kimi", "kimi_k25", "MLA", KimiK25Adapter, "Kimi_K25ForConditionalGeneration", _kimi_config),
        ModelEntry("tiny_deepseek_v2", "deepseek_v2", "MLA", DeepseekV2Adapter, "DeepseekV2ForCausalLM",
                   _deepseek_v2_config, notes="text only; k_pe interleaved"),
        ModelEntry("tiny_llava", "llava", "MHA", LlavaAdapter, "LlavaForConditionalGeneration", _llava_config,
                   _clip_pixels),
        ModelEntry("tiny_deepseek_vl", "deepseek_vl", "MHA", DeepseekVLAdapter, "DeepseekVLForConditionalGeneration",
                   _deepseek_vl_config, _siglip_pixels),
        # ----- the embedded toy binding model (trained in-repo, weights shipped in kamera/toy) -----
        ModelEntry("toy_binding", "qwen2_5_vl", "GQA", None, "Qwen2_5_VLForConditionalGeneration",
                   loader="kamera.toy.model:load_image", weights="toy/weights/image",
                   notes="A and B drawn as images through a tiny Qwen2.5-VL tower, M-RoPE; trained in-repo (kamera/toy)"),
        ModelEntry("toy_binding_text", "text", "GQA", None, "Qwen2ForCausalLM", loader="kamera.toy.model:load_text",
                   weights="toy/weights/text",
                   notes="2-layer Qwen2 trained on the binding task with A and B as words (kamera/toy)"),
        # ----- the paper's checkpoints (local copies only) -----
        ModelEntry("qwen2_5_vl_7b", "qwen2_5_vl", "GQA", QwenVLAdapter, "Qwen2_5_VLForConditionalGeneration",
                   hf_id="Qwen/Qwen2.5-VL-7B-Instruct", chat=QWEN_CHAT),
        ModelEntry("qwen3_vl_8b", "qwen3_vl", "GQA", Qwen3VLAdapter, "Qwen3VLForConditionalGeneration",
                   hf_id="Qwen/Qwen3-VL-8B-Instruct", chat=QWEN_CHAT),
        ModelEntry("kimi_vl_a3b", "kimi_vl", "MLA", KimiVLAdapter, "Kimi_K25ForConditionalGeneration",
                   hf_id="moonshotai/Kimi-VL-A3B-Instruct", chat=KIMI_CHAT,
                   loader="kamera.models.kimi_vl:load_kimi_vl_a3b", shaped="kamera.models.kimi_vl:write_shaped_kimi_vl_a3b",
                   notes="Hub tensors mapped onto native kimi_k25 / deepseek_v3 modules (MLA latent cache)"),
        ModelEntry("qwen3_omni_30b_a3b", "qwen3_omni_moe", "GQA", None, "Qwen3OmniMoeForConditionalGeneration",
                   hf_id="Qwen/Qwen3-Omni-30B-A3B-Instruct", chat=QWEN_CHAT),
        ModelEntry("deepseek_vl_7b", "deepseek_vl_hybrid", "MHA", None, "DeepseekVLHybridForConditionalGeneration",
                   hf_id="deepseek-community/deepseek-vl-7b-chat"),
        ModelEntry("phi3_5_vision", "phi3_v", "MHA", Phi3VAdapter, "Phi3ForCausalLM",
                   hf_id="microsoft/Phi-3.5-vision-instruct", chat=PHI3_CHAT,
                   loader="kamera.models.phi3_v:load_phi3_5_vision", shaped="kamera.models.phi3_v:write_shaped_phi3_5_vision",
                   notes="Hub tensors mapped onto native phi3 + CLIP modules; HD crops as the remote processor"),
        ModelEntry("internvl3_8b", "internvl", "GQA", None, "InternVLForConditionalGeneration",
                   hf_id="OpenGVLab/InternVL3-8B-hf"),
        ModelEntry("llava_1_5_7b", "llava", "MHA", LlavaAdapter, "LlavaForConditionalGeneration",
                   hf_id="llava-hf/llava-1.5-7b-hf", chat=("USER: ", "\nASSISTANT:")),
        ModelEntry("smolvlm2", "smolvlm", "GQA", None, "SmolVLMForConditionalGeneration",
                   hf_id="HuggingFaceTB/SmolVLM2-2.2B-Instruct"),
        *extras.entries(),
    ]
}


def weights_fingerprint(name: str) -> str | None:
    """sha256 (12 hex) of a model's shipped weight files, so retrained weights never reuse old rows."""
    e = entry(name)
    if e.weights is None:
        return None
    digest = hashlib.sha256()
    for f in sorted((Path(__file__).resolve().parent.parent / e.weights).glob("*")):
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:12]


def model_names(kind: str | None = None) -> list[str]:
    """Registered names of one kind ("tiny", "toy", "paper"), or all."""
    if kind not in (None, "tiny", "toy", "paper"):
        raise ValueError(f"kind must be 'tiny', 'toy' or 'paper', got {kind!r}")
    return [n for n, e in MODELS.items() if kind is None or e.kind == kind]


def entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise UnknownModelError(f"unknown model {name!r}; registered models: {', '.join(MODELS)}")
    return MODELS[name]


def checkpoint_path(name: str, path: str | Path | None = None, models_root: str | Path | None = None) -> Path:
    """Where a paper model's local checkpoint must be: ``path``, else ``<models_root or $KAMERA_MODELS>/<repo>``."""
    e = entry(name)
    if e.hf_id is None:
        raise ValueError(f"{name} is a tiny model built from its config; it has no checkpoint")
    if path is None:
        root = models_root or os.environ.get("KAMERA_MODELS")
        if not root:
            raise CheckpointNotFoundError(
                f"{name}: no checkpoint path given and KAMERA_MODELS is not set; set KAMERA_MODELS to the directory "
                f"holding {e.hf_id.split('/')[-1]}/ (fetch it with: huggingface-cli download {e.hf_id} "
                f"--local-dir $KAMERA_MODELS/{e.hf_id.split('/')[-1]})"
            )
        path = Path(root) / e.hf_id.split("/")[-1]
    path = Path(path)
    if not (path / "config.json").is_file():
        raise CheckpointNotFoundError(
            f"{name}: no checkpoint at {path} (config.json missing); fetch it on a machine with internet with: "
            f"huggingface-cli download {e.hf_id} --local-dir {path}"
        )
    return path


def _resolve(target: str) -> Callable:
    """The function a ``"module:function"`` field names."""
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def load_model(
    name: str,
    *,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    path: str | Path | None = None,
    models_root: str | Path | None = None,
    attn_implementation: str = "sdpa",
    seed: int = 0,
) -> Adapter:
    """Build (tiny) or load (paper) a registered model and wrap it in its family adapter."""
    e = entry(name)
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
        dtype = DTYPES[dtype]
    if e.loader is not None and e.kind == "toy":
        adapter = _resolve(e.loader)(dtype=dtype, device=device, attn_implementation=attn_implementation)
    elif e.kind == "tiny":
        torch.manual_seed(seed)
        cls = getattr(tf, e.model_class)
        model = cls._from_config(e.tiny_config(), attn_implementation=attn_implementation, dtype=dtype)
        processor = e.image_processor() if e.image_processor else None
        adapter = e.adapter(model.to(device), ByteTokenizer(), processor, name=name)
    elif e.loader is not None:  # a paper checkpoint mapped onto native modules by its own loader
        adapter = _resolve(e.loader)(
            checkpoint_path(name, path, models_root), dtype=dtype, device=device, attn_implementation=attn_implementation
        )
    else:
        ckpt = checkpoint_path(name, path, models_root)
        if e.adapter is None:
            raise NotImplementedError(
                f"{name} ({e.family}) is registered but has no adapter yet ({e.notes or 'its cache/vision path is unverified'}); "
                f"checkpoint found at {ckpt}"
            )
        cls = getattr(tf, e.model_class)
        model = cls.from_pretrained(
            ckpt, dtype=dtype, attn_implementation=attn_implementation, trust_remote_code=e.remote_code
        ).to(device)
        processor = tf.AutoProcessor.from_pretrained(ckpt, trust_remote_code=e.remote_code)
        adapter = e.adapter(model, processor.tokenizer, getattr(processor, "image_processor", None), name=name)
    adapter.chat = e.chat
    return adapter
