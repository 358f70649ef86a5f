"""The tiny text checkpoint the engine tests and the tiny Fig. 12 serve: a random Qwen2 of kamera's tiny widths.

vLLM loads a model from a ``save_pretrained`` directory, so the tiny twin is written to disk once per
(seed, dtype) under a folder whose name says both; it has no tokenizer (the engine runs on token ids,
``skip_tokenizer_init``). Widths are kamera's shared tiny decoder (:data:`kamera.models.tiny.TEXT`: 4
layers, 2 KV heads of 64, vocabulary 512), so rank 64 is below the K / V width of 128.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers as tf

from kamera.models.tiny import TEXT

ROPE_THETA = 1e6


def tiny_qwen2(root: str | Path, seed: int = 0, dtype: str = "float32") -> Path:
    """The tiny Qwen2 checkpoint under ``root`` (written when absent), seeded and in ``dtype``."""
    path = Path(root) / f"tiny_qwen2-seed{seed}-{dtype}"
    if (path / "config.json").is_file():
        return path
    torch.manual_seed(seed)
    cfg = tf.Qwen2Config(**TEXT, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA}, dtype=dtype)
    model = tf.Qwen2ForCausalLM(cfg).to(getattr(torch, dtype))
    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(tmp)
    tmp.rename(path)
    return path
