"""Shaped checkpoints of the remote-code models, written once and cached by content (helpers for the fixtures).

A shaped checkpoint has the real model's names, dimensions and files with random weights, so the
fp32 Kimi-VL adapter alone holds 5.6 GB: at most one adapter is kept loaded at a time.
The cache lives in ``$KAMERA_SHAPED_CACHE`` (default: the temp dir) under a key that hashes the writer
code, so an edited writer never reuses a stale checkpoint; a directory appears only once complete.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from kamera.models import hub_checkpoint, kimi_vl, phi3_v, standin_tokenizer

LLAMA2 = Path(os.environ.get("KAMERA_LLAMA2_TOKENIZER", Path(__file__).resolve().parents[3] / "shared/tokenizers/llama2"))
WRITERS = {"kimi_vl_a3b": kimi_vl.write_shaped_kimi_vl_a3b, "phi3_5_vision": phi3_v.write_shaped_phi3_5_vision}
LOADERS = {"kimi_vl_a3b": kimi_vl.load_kimi_vl_a3b, "phi3_5_vision": phi3_v.load_phi3_5_vision}
SHAPE = {"layers": 2, "vision_layers": 2, "seed": 0}


def cache_root() -> Path:
    return Path(os.environ.get("KAMERA_SHAPED_CACHE", Path(tempfile.gettempdir()) / "kamera-shaped-cache"))


def shaped_dir(name: str) -> Path:
    """The cached shaped checkpoint of ``name`` (written on first use; skips Phi without the Llama-2 tokenizer)."""
    kwargs = dict(SHAPE)
    if name == "phi3_5_vision":
        if not (LLAMA2 / "tokenizer.json").is_file():
            pytest.skip(f"the Llama-2 tokenizer is not at {LLAMA2} (set KAMERA_LLAMA2_TOKENIZER)")
        kwargs["tokenizer_dir"] = LLAMA2
    code = b"".join(Path(m.__file__).read_bytes() for m in (hub_checkpoint, kimi_vl, phi3_v, standin_tokenizer))
    key = hashlib.sha256(code + repr(sorted(SHAPE.items())).encode()).hexdigest()[:12]
    final = cache_root() / f"{name}-{key}"
    if not (final / "config.json").is_file():
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
        try:
            WRITERS[name](tmp, **kwargs)
            if not final.exists():
                tmp.rename(final)  # atomic: a killed writer never leaves a half checkpoint under the key
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
