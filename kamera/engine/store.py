"""The chunk store an engine connector serves from: captured KV pages and conditioning patches on disk.

One entry is one safetensors file in the store's folder, named by its key:

- a **page** (:func:`save_page` / :func:`load_page`): a :class:`~kamera.core.ChunkKV` of two channels per
  layer — GQA / MHA ``k`` (rotary) and ``v`` (content), [n, kv_heads, head_dim]; MLA ``c_kv`` (content,
  [n, 1, kv_lora_rank]) and ``k_pe`` (rotary, [n, 1, rope_dim]) — with its positions and the token ids it
  was computed from, so a connector can refuse a chunk spliced under other tokens, and its media (each image's
  or video's full content digest and placeholder range: placeholder token ids are alike for every image, so
  the digest is what tells two images apart);
- a **patch** (:func:`save_patch` / :func:`load_patch`): the full SVD factors of a
  :class:`~kamera.core.Patch` (layer granularity), so a request picks its rank at load time with
  ``truncate`` and never re-decomposes.

Every entry records the model it belongs to (the engine's model id and dtype, :func:`model_id`); loading
it for another model is a :class:`StoreError`, never a silent mix of two models' KV.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from kamera.core import ChannelSpec, ChunkKV, Patch, RotarySpec
from kamera.core.patch import Factors

_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")


class StoreError(ValueError):
    """A store entry that is missing, of another model or kind, or does not fit the request."""


def model_id(path: str, dtype: torch.dtype | str) -> str:
    """The identity a store entry is bound to: the checkpoint the engine serves and its dtype."""
    name = str(dtype).removeprefix("torch.")
    return f"{Path(path).resolve()}::{name}"


def gqa_specs(kv_heads: int, head_dim: int, rotary: RotarySpec) -> tuple[ChannelSpec, ...]:
    """The two channels of a GQA / MHA layer: ``k`` (rotary) and ``v`` (content)."""
    return (ChannelSpec("k", kv_heads, head_dim, rotary), ChannelSpec("v", kv_heads, head_dim))


def _path(root: Path, key: str) -> Path:
    if not _KEY.match(key):
        raise StoreError(f"store key {key!r} must be 1-200 characters of letters, digits, '_', '.', '-'")
    return Path(root) / f"{key}.safetensors"


def _meta(path: Path) -> tuple[dict, safe_open]:
    if not path.is_file():
        raise StoreError(f"chunk {path.stem!r} is not in the store {path.parent}")
    f = safe_open(str(path), framework="pt")
    return json.loads(f.metadata()["kamera"]), f


def _check(meta: dict, key: str, kind: str, model: str) -> None:
    if meta["kind"] != kind:
        raise StoreError(f"store entry {key!r} is a {meta['kind']}, not a {kind}")
    if meta["model"] != model:
        raise StoreError(f"store entry {key!r} belongs to model {meta['model']}, the engine serves {model}")


PAGE_CHANNELS = (("k", "v"), ("c_kv", "k_pe"))  # GQA / MHA, MLA


def save_page(root: str | Path, key: str, page: ChunkKV, token_ids: torch.Tensor, model: str,
              media: list[dict] | None = None) -> Path:
    """Write one page (channels ``k``, ``v`` or ``c_kv``, ``k_pe``) under ``key``, with its ``media``
    (``{modality, digest, offset, length}`` each, :func:`kamera.engine.vllm.media_of`); returns the file."""
    names = tuple(s.name for s in page.specs)
    if names not in PAGE_CHANNELS:
        raise StoreError(f"a page holds channels k, v or c_kv, k_pe, got {list(names)}")
    if token_ids.numel() != page.n_tokens:
        raise StoreError(f"{token_ids.numel()} token ids for a {page.n_tokens}-token page")
    tensors = {"positions": page.positions.contiguous(), "token_ids": token_ids.to(torch.int64).contiguous()}
    for l, chans in enumerate(page.layers):
        tensors |= {f"L{l}.{name}": t.contiguous() for name, t in zip(names, chans, strict=True)}
    meta = {"kind": "page", "model": model, "n_layers": page.n_layers, "channels": list(names), "media": media or []}
    path = _path(Path(root), key)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"kamera": json.dumps(meta)})
    return path


def load_page(root: str | Path, key: str, model: str, specs: tuple[ChannelSpec, ...]) -> tuple[ChunkKV, torch.Tensor]:
    """The page under ``key`` (as ``specs`` name its channels) and its token ids; a StoreError if absent or foreign."""
    meta, f = _meta(_path(Path(root), key))
    _check(meta, key, "page", model)
    names = [s.name for s in specs]
    if meta["channels"] != names:
        raise StoreError(f"page {key!r} has channels {meta['channels']}, the engine's are {names}")
    layers = [tuple(f.get_tensor(f"L{l}.{name}") for name in names) for l in range(meta["n_layers"])]
    try:
        page = ChunkKV(specs, layers, f.get_tensor("positions"))
    except ValueError as e:
        raise StoreError(f"store entry {key!r} does not fit the engine's layers: {e}") from None
    return page, f.get_tensor("token_ids")


def page_media(root: str | Path, key: str) -> list[dict]:
    """The media a page was captured with (none for a text page)."""
    meta, _ = _meta(_path(Path(root), key))
    return list(meta.get("media", []))


def save_patch(root: str | Path, key: str, patch: Patch, model: str) -> Path:
    """Write a layer-granularity patch's full factors under ``key``."""
    if patch.granularity != "layer":
        raise StoreError("the store holds layer-granularity patches")
    tensors = {"positions": patch.positions.contiguous()}
    for l, chans in enumerate(patch.factors):
        for c, (b,) in enumerate(chans):
            tensors |= {f"L{l}.c{c}.us": b.us.contiguous(), f"L{l}.c{c}.s": b.s.contiguous(),
                        f"L{l}.c{c}.vt": b.vt.contiguous()}
    meta = {"kind": "patch", "model": model, "n_layers": patch.n_layers, "channels": [s.name for s in patch.specs],
            "heads": [s.heads for s in patch.specs]}
    path = _path(Path(root), key)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"kamera": json.dumps(meta)})
    return path


def load_patch(root: str | Path, key: str, model: str, specs: tuple[ChannelSpec, ...]) -> Patch:
    """The full-rank patch under ``key``, its channels named by ``specs``."""
    meta, f = _meta(_path(Path(root), key))
    _check(meta, key, "patch", model)
    if meta["channels"] != [s.name for s in specs]:
        raise StoreError(f"patch {key!r} has channels {meta['channels']}, the engine's are {[s.name for s in specs]}")
    factors = [
        tuple((Factors(f.get_tensor(f"L{l}.c{c}.us"), f.get_tensor(f"L{l}.c{c}.s"), f.get_tensor(f"L{l}.c{c}.vt"),
                       specs[c].heads),) for c in range(len(specs)))
        for l in range(meta["n_layers"])
    ]
    return Patch(specs, factors, f.get_tensor("positions"))
