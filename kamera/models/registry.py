"""The model registry: tiny random twins of every family (CPU tests) and the paper's checkpoints.

Tiny models are built from the real transformers config classes (the same code path as the 7B
models) with widths chosen so rank sweeps up to 128 are meaningful: the content channel (K/V
width, or the MLA latent) is ≥ 128 wide. Paper models load from a local directory only:
``path=`` or ``$KAMERA_MODELS/<repo name>``; a missing checkpoint names the path tried and the
command that fetches it. How entries name loaders, shaped-checkpoint writers and extra entries:
:class:`kamera.models.entry.ModelEntry`; the loading path: :mod:`kamera.models.loading`.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

import torch
import transformers as tf

from kamera.models.base import Adapter
from kamera.models.entry import ModelEntry, resolve
from kamera.models.internvl import InternVLAdapter
from kamera.models.kimi_vl import KimiVLAdapter
from kamera.models.loading import load_native, resolve_attention, resolve_device
from kamera.models.mha import DeepseekVLAdapter, DeepseekVLHybridAdapter, LlavaAdapter
from kamera.models.mla import DeepseekV2Adapter, KimiK25Adapter
from kamera.models.phi3_v import Phi3VAdapter
from kamera.models.qwen_vl import Qwen3VLAdapter, Qwen3VLMoeAdapter, QwenOmniAdapter, QwenVLAdapter
from kamera.models.smolvlm import SmolVLMAdapter
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


def _qwen3_omni_config():
    """The Qwen3-Omni thinker's shape: MoE decoder with interleaved M-RoPE, deepstack vision tower, audio tower."""
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, decoder_sparse_step=1)
    return tf.Qwen3OmniMoeThinkerConfig(
        text_config=_qwen3_text(**moe),
        vision_config=dict(QWEN3_VISION, spatial_merge_size=2, temporal_patch_size=2),
        audio_config=dict(d_model=64, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=128, output_dim=256,
                          num_mel_bins=16, downsample_hidden_size=32),
        audio_token_id=VOCAB - 5, audio_start_token_id=VOCAB - 6, audio_end_token_id=VOCAB - 7,
        position_id_per_seconds=13, **SPECIAL_IDS,
    )


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


# Tiny models' fixed chat framing: what a chat template puts around a single-turn prompt (a user-turn header
# before the context, the assistant cue after the question, as Qwen3-VL's template renders them), so a tiny
# item has the shape of a paper-scale one: every item has a prefix, and the canonical KV(B|∅) sits behind it.
TINY_CHAT = ("<|user|>\n", "\n<|assistant|>\n")

# Checkpoints whose writer is in kamera.models.shaped: "kamera.models.shaped.<family module>:<model>".
_SHAPED = "kamera.models.shaped.{}:{}"

_ENTRIES = [
    # ----- tiny random twins (CPU) -----
    ModelEntry("tiny_qwen2_5_vl", "qwen2_5_vl", "GQA", QwenVLAdapter, "Qwen2_5_VLForConditionalGeneration",
               _qwen25_config, _qwen_pixels(14), chat=TINY_CHAT),
    ModelEntry("tiny_qwen3_vl", "qwen3_vl", "GQA", Qwen3VLAdapter, "Qwen3VLForConditionalGeneration",
               _qwen3_config, _qwen_pixels(16), chat=TINY_CHAT),
    ModelEntry("tiny_qwen3_vl_moe", "qwen3_vl_moe", "GQA", Qwen3VLMoeAdapter, "Qwen3VLMoeForConditionalGeneration",
               _qwen3_moe_config, _qwen_pixels(16), chat=TINY_CHAT),
    ModelEntry("tiny_qwen3_omni", "qwen3_omni_moe", "GQA", QwenOmniAdapter, "Qwen3OmniMoeThinkerForConditionalGeneration",
               _qwen3_omni_config, _qwen_pixels(16), chat=TINY_CHAT, notes="the thinker; audio tower built, not read"),
    ModelEntry("tiny_kimi", "kimi_k25", "MLA", KimiK25Adapter, "Kimi_K25ForConditionalGeneration", _kimi_config,
               chat=TINY_CHAT),
    ModelEntry("tiny_deepseek_v2", "deepseek_v2", "MLA", DeepseekV2Adapter, "DeepseekV2ForCausalLM",
               _deepseek_v2_config, chat=TINY_CHAT, notes="text only; k_pe interleaved"),
    ModelEntry("tiny_llava", "llava", "MHA", LlavaAdapter, "LlavaForConditionalGeneration", _llava_config,
               _clip_pixels, chat=TINY_CHAT),
    ModelEntry("tiny_deepseek_vl", "deepseek_vl", "MHA", DeepseekVLAdapter, "DeepseekVLForConditionalGeneration",
               _deepseek_vl_config, _siglip_pixels, chat=TINY_CHAT),
    # ----- the embedded toy binding model (trained in-repo, weights shipped in kamera/toy) -----
    ModelEntry("toy_binding", "qwen2_5_vl", "GQA", model_class="Qwen2_5_VLForConditionalGeneration",
               loader="kamera.toy.model:load_image", weights="toy/weights/image",
               notes="A and B drawn as images through a tiny Qwen2.5-VL tower, M-RoPE; trained in-repo (kamera/toy)"),
    ModelEntry("toy_binding_text", "text", "GQA", model_class="Qwen2ForCausalLM", loader="kamera.toy.model:load_text",
               weights="toy/weights/text",
               notes="2-layer Qwen2 trained on the binding task with A and B as words (kamera/toy)"),
    ModelEntry("toy_window", "text", "GQA", model_class="Qwen2ForCausalLM", loader="kamera.toy.model:load_window",
               weights="toy/weights/window", notes="2-layer Qwen2 trained on the toy window task (kamera/toy/window_task.py)"),
    # ----- the paper's checkpoints (local copies only) -----
    ModelEntry("qwen2_5_vl_7b", "qwen2_5_vl", "GQA", QwenVLAdapter, "Qwen2_5_VLForConditionalGeneration",
               hf_id="Qwen/Qwen2.5-VL-7B-Instruct", shaped=_SHAPED.format("qwen", "qwen2_5_vl_7b")),
    ModelEntry("qwen3_vl_8b", "qwen3_vl", "GQA", Qwen3VLAdapter, "Qwen3VLForConditionalGeneration",
               hf_id="Qwen/Qwen3-VL-8B-Instruct", shaped=_SHAPED.format("qwen", "qwen3_vl_8b")),
    ModelEntry("kimi_vl_a3b", "kimi_vl", "MLA", KimiVLAdapter, "Kimi_K25ForConditionalGeneration",
               hf_id="moonshotai/Kimi-VL-A3B-Instruct", loader="kamera.models.kimi_vl:load_kimi_vl_a3b",
               shaped=_SHAPED.format("kimi_vl", "kimi_vl_a3b"),
               notes="Hub tensors mapped onto native kimi_k25 / deepseek_v3 modules (MLA latent cache), no remote code"),
    ModelEntry("qwen3_omni_30b_a3b", "qwen3_omni_moe", "GQA", QwenOmniAdapter, "Qwen3OmniMoeForConditionalGeneration",
               hf_id="Qwen/Qwen3-Omni-30B-A3B-Instruct", shaped=_SHAPED.format("qwen", "qwen3_omni_30b_a3b"),
               load_kwargs=(("enable_audio_output", False),), submodule="thinker",
               notes="the thinker only (text, images, video; MoE); the talker and code2wav are not loaded"),
    ModelEntry("deepseek_vl_7b", "deepseek_vl_hybrid", "MHA", DeepseekVLHybridAdapter,
               "DeepseekVLHybridForConditionalGeneration", hf_id="deepseek-community/deepseek-vl-7b-chat",
               shaped=_SHAPED.format("deepseek_vl", "deepseek_vl_7b")),
    ModelEntry("phi3_5_vision", "phi3_v", "MHA", Phi3VAdapter, "Phi3ForCausalLM",
               hf_id="microsoft/Phi-3.5-vision-instruct", loader="kamera.models.phi3_v:load_phi3_5_vision",
               shaped=_SHAPED.format("phi3_v", "phi3_5_vision"),
               notes="Hub tensors mapped onto native phi3 + CLIP modules; HD crops as the remote processor, no remote code"),
    ModelEntry("internvl3_8b", "internvl", "GQA", InternVLAdapter, "InternVLForConditionalGeneration",
               hf_id="OpenGVLab/InternVL3-8B-hf", shaped=_SHAPED.format("internvl", "internvl3_8b")),
    ModelEntry("llava_1_5_7b", "llava", "MHA", LlavaAdapter, "LlavaForConditionalGeneration",
               hf_id="llava-hf/llava-1.5-7b-hf", shaped=_SHAPED.format("llava", "llava_1_5_7b")),
    ModelEntry("smolvlm2", "smolvlm", "MHA", SmolVLMAdapter, "SmolVLMForConditionalGeneration",
               hf_id="HuggingFaceTB/SmolVLM2-2.2B-Instruct", shaped=_SHAPED.format("smolvlm", "smolvlm2")),
]

# Modules contributing further entries: every module-level ModelEntry (or list / tuple of them) is
# merged. An entry may take the name of a registered placeholder (a paper model with no adapter and no
# loader); any other clash is an error.
EXTRA_MODULES: tuple[str, ...] = ("kamera.models.extras",)


def _merge(entries: list[ModelEntry], modules: tuple[str, ...]) -> dict[str, ModelEntry]:
    merged: dict[str, ModelEntry] = {}
    for e in entries:
        if e.name in merged:
            raise ValueError(f"model {e.name!r} is registered twice")
        merged[e.name] = e
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:
                continue  # an optional contribution that is not installed
            raise
        found: list[ModelEntry] = []
        for value in vars(module).values():
            if isinstance(value, ModelEntry):
                found.append(value)
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, ModelEntry) for v in value):
                found.extend(value)
        for e in dict.fromkeys(found):
            old = merged.get(e.name)
            if old is not None and old.has_adapter:
                raise ValueError(f"{name} registers {e.name!r}, which is already registered with an adapter")
            merged[e.name] = e
    return merged


MODELS: dict[str, ModelEntry] = _merge(_ENTRIES, EXTRA_MODULES)


def weights_fingerprint(name: str) -> str | None:
    """sha256 (12 hex) of a model's shipped weight files, so retrained weights never reuse old rows."""
    e = entry(name)
    if e.weights is None:
        return None
    digest = hashlib.sha256()
    for f in sorted(_package_path(e.weights).glob("*")):
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:12]


def _package_path(rel: str) -> Path:
    return Path(__file__).resolve().parent.parent / rel


def model_names(kind: str | None = None) -> list[str]:
    """Registered names of one kind ("tiny", "toy", "paper"), or all."""
    if kind not in (None, "tiny", "toy", "paper"):
        raise ValueError(f"kind must be 'tiny', 'toy' or 'paper', got {kind!r}")
    return [n for n, e in MODELS.items() if kind is None or e.kind == kind]


def entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise UnknownModelError(f"unknown model {name!r}; registered models: {', '.join(MODELS)}")
    return MODELS[name]


def fetch_hint(e: ModelEntry, where: str | Path) -> str:
    """The command that fetches a checkpoint (huggingface_hub's ``hf`` CLI)."""
    return f"hf download {e.hf_id} --local-dir {where}"


def checkpoint_path(name: str, path: str | Path | None = None, models_root: str | Path | None = None) -> Path:
    """Where a paper model's local checkpoint must be: ``path``, else ``<models_root or $KAMERA_MODELS>/<repo>``."""
    e = entry(name)
    if e.hf_id is None:
        raise ValueError(f"{name} is a {e.kind} model; it has no checkpoint")
    if path is None:
        root = models_root or os.environ.get("KAMERA_MODELS")
        if not root:
            raise CheckpointNotFoundError(
                f"{name}: no checkpoint path given and KAMERA_MODELS is not set; set KAMERA_MODELS to the directory "
                f"holding {e.repo_dir}/ (fetch it with: {fetch_hint(e, '$KAMERA_MODELS/' + e.repo_dir)})"
            )
        path = Path(root) / e.repo_dir
    path = Path(path)
    if not (path / "config.json").is_file():
        raise CheckpointNotFoundError(
            f"{name}: no checkpoint at {path} (config.json missing); fetch it on a machine with internet with: "
            f"{fetch_hint(e, path)}"
        )
    return path


def model_problems(name: str, path: str | Path | None = None, models_root: str | Path | None = None) -> list[str]:
    """Why ``name`` cannot load, found without loading anything (empty when it can): an unknown name, a paper
    model with no adapter yet (said first: fetching its checkpoint would not help), a missing checkpoint."""
    try:
        e = entry(name)
    except UnknownModelError as err:
        return [str(err)]
    if e.kind != "paper":
        return []
    problems = []
    if not e.has_adapter:
        problems.append(f"model {name} ({e.family}) has no adapter yet: {e.notes or 'unverified family'}")
    try:
        checkpoint_path(name, path, models_root)
    except CheckpointNotFoundError as err:
        problems.append(str(err))
    return problems


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def _one_device(device: str) -> str:
    """Small models live on one device: "auto" (which only survives resolution with CUDA) is the first GPU."""
    return "cuda" if device == "auto" else device


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
    """Build (tiny) or load (toy, paper) a registered model and wrap it in its family adapter.

    ``device``: "cpu", "cuda", "cuda:1", … or "auto" (all visible GPUs through accelerate's
    ``device_map="auto"``, so a model larger than one GPU spreads over a node; the CPU without CUDA).
    ``attn_implementation``: "sdpa", "eager", "flash_attention_2" or "auto" (flash-attention 2 on CUDA
    when installed, else sdpa); forwards under a 4D mask always run a kernel that takes one.
    """
    e = entry(name)
    dtype = parse_dtype(dtype)
    device = resolve_device(device)
    attn = resolve_attention(attn_implementation, device)
    if e.kind == "tiny":
        torch.manual_seed(seed)
        cls = getattr(tf, e.model_class)
        model = cls._from_config(e.tiny_config(), attn_implementation=attn, dtype=dtype)
        processor = e.image_processor() if e.image_processor else None
        adapter = e.adapter(model.to(_one_device(device)), ByteTokenizer(), processor, name=name)
        adapter.chat = e.chat
        return adapter
    if e.kind == "toy":
        return resolve(e.loader, f"{name} loader")(
            path=_package_path(e.weights), dtype=dtype, device=_one_device(device), attn_implementation=attn,
        )
    ckpt = checkpoint_path(name, path, models_root)
    if not e.has_adapter:
        raise NotImplementedError(
            f"{name} ({e.family}) is registered but has no adapter yet ({e.notes or 'its cache/vision path is unverified'}); "
            f"checkpoint found at {ckpt}"
        )
    if e.loader is not None:
        return resolve(e.loader, f"{name} loader")(ckpt, dtype=dtype, device=device, attn_implementation=attn)
    return load_native(e, ckpt, dtype=dtype, device=device, attn_implementation=attn)
