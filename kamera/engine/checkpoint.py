"""The tiny checkpoints the engine tests and the tiny Fig. 12 serve: a random Qwen2 (GQA) and a random DeepSeek-V2 (MLA).

vLLM loads a model from a ``save_pretrained`` directory, so each tiny twin is written to disk once per
(seed, dtype) under a folder whose name says all three; it has no tokenizer (the engine runs on token ids,
``skip_tokenizer_init``). The Qwen2 has kamera's shared tiny decoder widths (:data:`kamera.models.tiny.TEXT`:
4 layers, 2 KV heads of 64, vocabulary 512), so rank 64 is below the K / V width of 128.

The DeepSeek-V2 is kamera's tiny MLA twin (:data:`kamera.models.tiny.MLA_TEXT`: MoE with 4 routed experts and
one shared, dense first layer) with two changes vLLM needs: the latent page row ``kv_lora_rank +
qk_rope_head_dim`` must be one of the head sizes vLLM's MLA metadata accepts (``MLACommonBackend.
get_supported_head_sizes`` in ``vllm/model_executor/layers/attention/mla_attention.py``: 320, 512, 576; the
CPU decode kernel of ``vllm/v1/attention/backends/mla/cpu_mla.py`` compiles 576 only), so the latent is
DeepSeek-V2's own 512 and k_pe its own 64 (the twin's 128 + 32 = 160 is refused with "Head dimension 160 is
not supported by MLA"); and ``n_group = topk_group = 1``, since vLLM's DeepSeek-V2 always routes through
grouped top-k and its CPU router asserts both are set (one group is plain greedy top-k, transformers' rule).
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers as tf

from kamera.models.tiny import MLA_TEXT, TEXT

ROPE_THETA = 1e6
MLA_ENGINE = {**MLA_TEXT, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "n_group": 1, "topk_group": 1}


def _write(path: Path, seed: int, dtype: str, config: tf.PretrainedConfig, model_class: type) -> Path:
    if (path / "config.json").is_file():
        return path
    torch.manual_seed(seed)
    model = model_class(config).to(getattr(torch, dtype))
    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(tmp)
    tmp.rename(path)
    return path


def tiny_qwen2(root: str | Path, seed: int = 0, dtype: str = "float32") -> Path:
    """The tiny Qwen2 checkpoint under ``root`` (written when absent), seeded and in ``dtype``."""
    cfg = tf.Qwen2Config(**TEXT, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA}, dtype=dtype)
    return _write(Path(root) / f"tiny_qwen2-seed{seed}-{dtype}", seed, dtype, cfg, tf.Qwen2ForCausalLM)


def tiny_deepseek_v2(root: str | Path, seed: int = 0, dtype: str = "float32") -> Path:
    """The tiny DeepSeek-V2 (MLA) checkpoint under ``root`` (written when absent), seeded and in ``dtype``."""
    cfg = tf.DeepseekV2Config(**MLA_ENGINE, dtype=dtype)
    return _write(Path(root) / f"tiny_deepseek_v2-seed{seed}-{dtype}", seed, dtype, cfg, tf.DeepseekV2ForCausalLM)


CHECKPOINTS = {"qwen2": tiny_qwen2, "deepseek_v2": tiny_deepseek_v2}  # engine family → its tiny checkpoint
