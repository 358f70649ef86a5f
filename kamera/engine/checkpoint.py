"""The tiny checkpoints the engine tests and the tiny Fig. 12 serve: a random Qwen2 (GQA), a random DeepSeek-V2 (MLA),
a random Qwen2.5-VL (sectioned M-RoPE) and a random Qwen3-VL (interleaved M-RoPE, deepstack).

vLLM loads a model from a ``save_pretrained`` directory, so each tiny twin is written to disk once per
(seed, dtype) under a folder whose name says all three. The text twins have no tokenizer (the engine runs on token
ids, ``skip_tokenizer_init``). The VL twins are kamera's tiny Qwen2.5-VL / Qwen3-VL (:func:`kamera.models.tiny.
qwen25_config`, :func:`~kamera.models.tiny.qwen3_config`: 4 decoder layers, a 2-block vision tower, at most 4 × 4
merged tokens an image) saved with what vLLM's multimodal processor loads: the image processor
(``qwen_pixels_14`` / ``_16``), a video processor, and a stand-in byte-level tokenizer of the twin's 512 ids with
the Qwen special tokens at the twin's ids (:func:`kamera.models.standin_tokenizer.standin_tokenizer`), so no
tokenizer file from outside is needed. The Qwen2 has kamera's shared tiny decoder widths
(:data:`kamera.models.tiny.TEXT`: 4 layers, 2 KV heads of 64, vocabulary 512), so rank 64 is below the K / V width
of 128.

The Qwen2 and the DeepSeek-V2 are the registry's engine twins, ``tiny_qwen2`` and ``tiny_deepseek_v2_engine``
(:func:`kamera.models.tiny.qwen2_config`, :func:`~kamera.models.tiny.deepseek_v2_engine_config`: the MLA twin with
DeepSeek-V2's own latent 512 and k_pe 64, the widths vLLM's MLA takes, and one expert group); an engine job
(:mod:`kamera.engine.shape`) writes the twin it loaded with :func:`save_checkpoint`, so vLLM and kamera's own
splice read the same weights.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers as tf

from kamera.models import tiny
from kamera.models.standin_tokenizer import standin_tokenizer


def save_checkpoint(model: tf.PreTrainedModel, path: Path, processor: Any | None = None) -> Path:
    """``model`` (and its processor files) as a ``save_pretrained`` folder vLLM loads, written whole or not at all (a
    dot-free ``.tmp`` sibling renamed into place; a half-written copy of a killed run is replaced)."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    if processor is not None:
        processor.save_pretrained(tmp)
    tmp.rename(path)
    return path


def _write(
    root: str | Path,
    name: str,
    seed: int,
    dtype: str,
    config: tf.PretrainedConfig,
    model_class: type,
    processor: Callable[[], Any] | None = None,
) -> Path:
    """The checkpoint ``<root>/<name>-seed<seed>-<dtype>``: ``model_class(config)`` seeded and in ``dtype``, with the
    processor's files, written when absent."""
    path = Path(root) / f"{name}-seed{seed}-{dtype}"
    if (path / "config.json").is_file():
        return path
    config.dtype = dtype
    torch.manual_seed(seed)
    return save_checkpoint(model_class(config).to(getattr(torch, dtype)), path, processor() if processor else None)


def qwen_vl_processor(family: str) -> Any:
    """The twin's processor: image processor, video processor and the stand-in tokenizer (module docstring)."""
    specials = {
        "<|endoftext|>": tiny.TEXT["eos_token_id"],
        "<|im_start|>": 3,
        "<|im_end|>": 4,
        "<|vision_start|>": tiny.VSTART,
        "<|vision_end|>": tiny.VEND,
        "<|image_pad|>": tiny.IMAGE,
        "<|video_pad|>": tiny.VIDEO,
    }
    tok = standin_tokenizer(tiny.VOCAB, specials, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    patch = 14 if family == "qwen2_5_vl" else 16
    image = tiny.qwen_pixels_14() if family == "qwen2_5_vl" else tiny.qwen_pixels_16()
    if family == "qwen2_5_vl":
        video = tf.Qwen2VLVideoProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2)
        return tf.Qwen2_5_VLProcessor(image_processor=image, tokenizer=tok, video_processor=video)
    video = tf.Qwen3VLVideoProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2)
    return tf.Qwen3VLProcessor(image_processor=image, tokenizer=tok, video_processor=video)


def tiny_qwen2(root: str | Path, seed: int = 0, dtype: str = "float32") -> Path:
    """The tiny Qwen2 checkpoint under ``root`` (written when absent), seeded and in ``dtype``."""
    return _write(root, "tiny_qwen2", seed, dtype, tiny.qwen2_config(), tf.Qwen2ForCausalLM)


def tiny_deepseek_v2(root: str | Path, seed: int = 0, dtype: str = "float32") -> Path:
    """The tiny DeepSeek-V2 (MLA) checkpoint under ``root`` (written when absent), seeded and in ``dtype``."""
    return _write(root, "tiny_deepseek_v2", seed, dtype, tiny.deepseek_v2_engine_config(), tf.DeepseekV2ForCausalLM)


def tiny_qwen2_5_vl(root: str | Path, seed: int = 0, dtype: str = "float32") -> Path:
    """The tiny Qwen2.5-VL (sectioned M-RoPE 8/12/12) with its processor files, under ``root``."""
    return _write(root, "tiny_qwen2_5_vl", seed, dtype, tiny.qwen25_config(), tf.Qwen2_5_VLForConditionalGeneration,
                  lambda: qwen_vl_processor("qwen2_5_vl"))


def tiny_qwen3_vl(root: str | Path, seed: int = 0, dtype: str = "float32") -> Path:
    """The tiny Qwen3-VL (interleaved M-RoPE 12/10/10, deepstack at both vision blocks) with its processor files."""
    return _write(root, "tiny_qwen3_vl", seed, dtype, tiny.qwen3_config(), tf.Qwen3VLForConditionalGeneration,
                  lambda: qwen_vl_processor("qwen3_vl"))


# SmolLM2-135M's published config.json (HuggingFaceTB/SmolLM2-135M): a Llama with every layer and width of the real
# model, for the engine clock (kamera.engine.clock); its weights are random, which changes no time.
SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=8192,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    bos_token_id=0,
    eos_token_id=0,
    rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
)


def smollm2_135m(root: str | Path, seed: int = 0, dtype: str = "float32") -> Path:
    """A full-depth random SmolLM2-135M-class Llama (30 layers, hidden 576, GQA 9 / 3 heads of 64) under ``root``."""
    return _write(root, "smollm2_135m_random", seed, dtype, tf.LlamaConfig(**SMOLLM2_135M), tf.LlamaForCausalLM)


CHECKPOINTS = {
    "qwen2": tiny_qwen2,
    "deepseek_v2": tiny_deepseek_v2,
    "qwen2_5_vl": tiny_qwen2_5_vl,
    "qwen3_vl": tiny_qwen3_vl,
}  # engine family → its tiny checkpoint
