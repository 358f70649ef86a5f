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

Every entry records the model it belongs to (the engine's model id: checkpoint, dtype and a digest of the
checkpoint's weight files, :func:`model_id`) and a SHA-256 of its own tensors; loading it for another model or
other weights, or reading a file that is truncated, garbled or whose tensors no longer hash to the recorded
digest, is a :class:`StoreError` naming the cause, never a silent mix of two models' KV or a partly wrong page.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from kamera.core import ChannelSpec, ChunkKV, Patch, RotarySpec
from kamera.core.patch import Factors
from kamera.data.media import cached_sha256, digest_store, weight_files

_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")


class StoreError(ValueError):
    """A store entry that is missing, of another model or kind, or does not fit the request."""

CONFIG = "config.json"  # a checkpoint's config: part of its weights digest beside its weight files
RECORDS = "timing.jsonl"  # per splice or fallback, one JSON line in the store folder, written by either engine


def record(root: str | Path, entry: dict) -> None:
    """Append ``entry`` to the store's :data:`RECORDS` (a splice's timing, a fallback and its cause)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    with open(Path(root) / RECORDS, "a") as f:
        f.write(json.dumps(entry) + "\n")


def records(root: str | Path) -> list[dict]:
    """The store's records so far, oldest first."""
    path = Path(root) / RECORDS
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def weights_digest(path: str | Path) -> str:
    """The first 16 hex digits of a SHA-256 over the checkpoint folder's config and weight files (names and each
    file's sha256: ``config.json`` and each file of :data:`~kamera.data.media.WEIGHT_SUFFIXES`), so a page
    captured from other weights at the same path is not this model's ('-' for a folder with none of them). Each
    file is read whole once, then only ``stat``-ed (:func:`kamera.data.media.cached_sha256`, the record a job's
    weight digest uses), so an engine start does not rehash a large checkpoint."""
    root = Path(path)
    files = sorted([*weight_files(root), *([root / CONFIG] if (root / CONFIG).is_file() else [])])
    if not files:
        return "-"
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{cached_sha256(f, digest_store(root))}\0".encode())
    return h.hexdigest()[:16]


def model_id(path: str, dtype: torch.dtype | str) -> str:
    """The identity a store entry is bound to: the checkpoint the engine serves, its dtype and its weights'
    digest (:func:`weights_digest`)."""
    name = str(dtype).removeprefix("torch.")
    return f"{Path(path).resolve()}::{name}::{weights_digest(path)}"


def checkpoint_of(model: str) -> str:
    """The checkpoint and dtype a :func:`model_id` names, without its weights' digest."""
    return model.rsplit("::", 1)[0]


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes (in name order): a page's or patch's integrity."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def gqa_specs(kv_heads: int, head_dim: int, rotary: RotarySpec) -> tuple[ChannelSpec, ...]:
    """The two channels of a GQA / MHA layer: ``k`` (rotary) and ``v`` (content)."""
    return (ChannelSpec("k", kv_heads, head_dim, rotary), ChannelSpec("v", kv_heads, head_dim))


def entry_path(root: Path, key: str) -> Path:
    """The file of store entry ``key`` under ``root`` (a :class:`StoreError` for a key that is not a safe name)."""
    if not _KEY.match(key):
        raise StoreError(f"store key {key!r} must be 1-200 characters of letters, digits, '_', '.', '-'")
    return Path(root) / f"{key}.safetensors"


def _meta(path: Path) -> tuple[dict, safe_open]:
    if not path.is_file():
        raise StoreError(f"chunk {path.stem!r} is not in the store {path.parent}")
    try:
        f = safe_open(str(path), framework="pt")
        return json.loads(f.metadata()["kamera"]), f
    except Exception as err:  # safetensors' own error type, a JSON or key error: the file is not an entry
        raise StoreError(f"store entry {path.stem!r} is unreadable (corrupt): {str(err).splitlines()[0]}") from None


def _tensors(f: safe_open, meta: dict, key: str) -> dict[str, torch.Tensor]:
    """Every tensor of an entry, after checking they hash to the digest recorded when it was written."""
    try:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as err:  # a data region cut short or garbled
        raise StoreError(f"store entry {key!r} is unreadable (corrupt): {str(err).splitlines()[0]}") from None
    if meta.get("sha256") != tensors_digest(tensors):
        raise StoreError(f"store entry {key!r} is corrupt: its tensors do not hash to the digest recorded with them")
    return tensors


def _save(root: str | Path, key: str, tensors: dict[str, torch.Tensor], meta: dict) -> Path:
    """Write one entry: its tensors and its metadata with their digest."""
    path = entry_path(Path(root), key)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"kamera": json.dumps(meta | {"sha256": tensors_digest(tensors)})})
    return path


def _check(meta: dict, key: str, kind: str, model: str) -> None:
    if meta["kind"] != kind:
        raise StoreError(f"store entry {key!r} is a {meta['kind']}, not a {kind}")
    if meta["model"] != model:
        same = checkpoint_of(meta["model"]) == checkpoint_of(model)
        why = "was captured from other weights at the same path" if same else f"belongs to model {meta['model']}"
        raise StoreError(f"store entry {key!r} {why}, the engine serves {model}")


PAGE_CHANNELS = (("k", "v"), ("c_kv", "k_pe"))  # GQA / MHA, MLA


def attention_of(specs: tuple[ChannelSpec, ...]) -> str:
    """"MLA" for a page of MLA's channels (``c_kv``, ``k_pe``), else "GQA" (``k``, ``v``: GQA / MHA)."""
    return "MLA" if tuple(s.name for s in specs) == PAGE_CHANNELS[1] else "GQA"


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
    return _save(root, key, tensors, meta)


def load_page(root: str | Path, key: str, model: str, specs: tuple[ChannelSpec, ...]) -> tuple[ChunkKV, torch.Tensor]:
    """The page under ``key`` (as ``specs`` name its channels) and its token ids; a StoreError if absent or foreign."""
    meta, f = _meta(entry_path(Path(root), key))
    _check(meta, key, "page", model)
    names = [s.name for s in specs]
    if meta["channels"] != names:
        raise StoreError(f"page {key!r} has channels {meta['channels']}, the engine's are {names}")
    t = _tensors(f, meta, key)
    layers = [tuple(t[f"L{l}.{name}"] for name in names) for l in range(meta["n_layers"])]
    try:
        page = ChunkKV(specs, layers, t["positions"])
    except ValueError as e:
        raise StoreError(f"store entry {key!r} does not fit the engine's layers: {e}") from None
    return page, t["token_ids"]


def page_media(root: str | Path, key: str) -> list[dict]:
    """The media a page was captured with (none for a text page)."""
    meta, _ = _meta(entry_path(Path(root), key))
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
    return _save(root, key, tensors, meta)


def load_patch(root: str | Path, key: str, model: str, specs: tuple[ChannelSpec, ...]) -> Patch:
    """The full-rank patch under ``key``, its channels named by ``specs``."""
    meta, f = _meta(entry_path(Path(root), key))
    _check(meta, key, "patch", model)
    if meta["channels"] != [s.name for s in specs]:
        raise StoreError(f"patch {key!r} has channels {meta['channels']}, the engine's are {[s.name for s in specs]}")
    t = _tensors(f, meta, key)
    factors = [
        tuple((Factors(t[f"L{l}.c{c}.us"], t[f"L{l}.c{c}.s"], t[f"L{l}.c{c}.vt"], specs[c].heads),)
              for c in range(len(specs)))
        for l in range(meta["n_layers"])
    ]
    return Patch(specs, factors, t["positions"])
