"""Loading a registered model: :func:`load_model`, the one entry point (a tiny twin built from its config, a toy
model from its shipped weights, a paper checkpoint through its loader or the native path of
:mod:`kamera.models.loading`, ``model=hf`` with the adapter of its ``model_type``)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers as tf

from kamera.core.precision import parse_dtype
from kamera.models.base import Adapter
from kamera.models.checkpoints import UnsupportedCheckpointError, checkpoint_path, own_entry
from kamera.models.entry import resolve
from kamera.models.loading import load_native, resolve_attention, resolve_device
from kamera.models.problems import family_mismatch, model_problems
from kamera.models.registry import PACKAGE, entry
from kamera.models.tokenizer import ByteTokenizer


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
    chat: str = "template",
) -> Adapter:
    """Build (tiny) or load (toy, paper) a registered model and wrap it in its family adapter; ``model=hf``
    loads the checkpoint at ``path`` with the adapter of its ``model_type`` (:func:`own_entry`). A ``path`` on a
    tiny or toy model, or a checkpoint of another family than the entry's, is a ValueError before any weights load.

    ``device``: "cpu", "cuda", "cuda:1", … or "auto" (all visible GPUs through accelerate's
    ``device_map="auto"``, so a model larger than one GPU spreads over a node; the CPU without CUDA).
    ``attn_implementation``: "sdpa", "eager", "flash_attention_2" or "auto" (flash-attention 2 on CUDA
    when installed, else sdpa); forwards under a 4D mask always run a kernel that takes one.
    ``chat``: "template" (the checkpoint's chat template) or "none" (no template: a base model), for
    checkpoints loaded through the native path.
    """
    e = entry(name)
    if e.kind != "paper" and path is not None:
        raise ValueError(model_problems(name, path)[0])  # never a silent swap to the built-in weights
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
            path=PACKAGE / e.weights, dtype=dtype, device=_one_device(device), attn_implementation=attn,
        )
    ckpt = checkpoint_path(name, path, models_root)
    if not e.has_adapter:
        raise NotImplementedError(
            f"{name} ({e.family}) is registered but has no adapter yet "
            f"({e.notes or 'its cache/vision path is unverified'}); "
            f"checkpoint found at {ckpt}"
        )
    if e.from_checkpoint:
        e = own_entry(name, ckpt)
    elif problem := family_mismatch(e, ckpt):
        raise UnsupportedCheckpointError(problem)
    if e.loader is not None:
        return resolve(e.loader, f"{name} loader")(ckpt, dtype=dtype, device=device, attn_implementation=attn)
    return load_native(e, ckpt, dtype=dtype, device=device, attn_implementation=attn, chat=chat)
