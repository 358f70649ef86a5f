"""A GGUF of a served text family → a plain Hub-layout checkpoint directory, once.

transformers' GGUF reader (``from_pretrained(dir, gguf_file=…)``, the path ``model.path=<file>.gguf`` takes) builds
the native class and dequantises every block into it, but marks the model as GGUF-quantised and refuses to
``save_pretrained`` it. The dequantised state dict is therefore written into a fresh instance of the same class built
from the same config without its ``quantization_config``: the tensors are the reader's, value for value (float32,
in which Q4_K / Q5_0 / Q6_K / Q8_0 blocks dequantise exactly), and the directory loads as any checkpoint a user
brings (``model=hf model.path=<dir>``). The tokenizer is the one the reader builds from the file's
``tokenizer.ggml.*`` metadata. ``real.json`` beside it records the GGUF's name, size and sha256 and the
transformers version; it is written last, and the directory is built under a staging name and renamed into place,
so a killed conversion never leaves a directory that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
import transformers as tf

from kamera.real.package import RealInputError

MANIFEST = "real.json"


def converted(out: Path, sha256: str) -> bool:
    """Whether ``out`` holds a complete conversion of the GGUF with ``sha256`` by this transformers version."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("gguf_sha256") == sha256 and manifest.get("transformers") == tf.__version__


def convert(gguf: Path, sha256: str, out: Path, model_class: str = "Gemma3ForCausalLM") -> Path:
    """Write the Hub-layout directory of ``gguf`` at ``out`` (module docstring) unless it is already there."""
    if converted(out, sha256):
        return out
    cls = getattr(tf, model_class)
    try:
        quantised = cls.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = tf.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as err:  # an architecture the reader maps to another class, a corrupt tensor block
        why = f"{type(err).__name__}: {err}"
        raise RealInputError(f"{gguf}: transformers cannot read it as {model_class} ({why})") from None
    config = quantised.config.to_dict()
    config.pop("quantization_config", None)
    with torch.device("meta"):
        native = cls(type(quantised.config).from_dict(config))
    native.load_state_dict(quantised.state_dict(), assign=True, strict=True)
    native.tie_weights()
    staging = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    native.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    manifest = {
        "gguf": gguf.name,
        "gguf_bytes": gguf.stat().st_size,
        "gguf_sha256": sha256,
        "transformers": tf.__version__,
        "model_class": model_class,
        "dtype": "float32",
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out
