"""A job's identity, the key of its results shard (:mod:`kamera.job.store`):

    config      model name, dtype (canonical spelling), benchmark name / subsets / split / kwargs (as the item
                shape spells them out), n_items, seed, canonical_context, eta_floor, max_new_tokens (a pure
                function of the composed config: status and renderers find a job's shard by it without data
                or weights)
    checkpoint  a fingerprint of the checkpoint actually loaded: for a paper model its config.json,
                tokenizer / processor files and the safetensors headers (never the weight bytes) of
                the directory resolved from model.path or KAMERA_MODELS; for a tiny model the config
                it is built from; for a toy model the hash of its shipped weights
    data        a fingerprint of the data actually read: the annotation files the loader opened and
                the ids of the selected items

so a second copy of a benchmark, a repaired medium that changes the selection, or another
checkpoint directory is a different job, never a silent reuse, while byte-identical copies share
results. Arms and probes are not part of it (rows are keyed by item and arm within the shard).
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

from omegaconf import DictConfig

from kamera.items.selection import Selection
from kamera.job.shape import shape_of
from kamera.job.spec import DTYPES
from kamera.job.store import digest

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    """sha256 (16 hex) of a file's bytes, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()[:16]

def safetensors_header(path: Path) -> bytes:
    """The JSON header of a .safetensors file (tensor names, dtypes, shapes, offsets; no weights)."""
    with open(path, "rb") as fh:
        size = struct.unpack("<Q", fh.read(8))[0]
        return fh.read(size)


def data_fingerprint(selection: Selection) -> dict:
    """sha256 of each annotation file read (relative to the benchmark root) and of the selected ids."""
    files = {}
    for f in sorted(set(selection.files)):
        rel = f.relative_to(selection.root) if selection.root and f.is_relative_to(selection.root) else f
        files[str(rel)] = file_digest(f)
    return {"files": files, "items": digest(selection.ids)}


def checkpoint_fingerprint(cfg: DictConfig) -> str:
    """What identifies the model a job loads (see the module docstring); weights are never read whole."""
    from kamera.models import checkpoint_path, entry
    from kamera.models.registry import weights_fingerprint

    e = entry(cfg.model.name)
    if e.kind == "toy":
        return f"toy:{weights_fingerprint(e.name)}"
    if e.kind == "tiny":
        config = e.tiny_config().to_dict()
        config.pop("transformers_version", None)
        return f"tiny:{digest(config)}"
    ckpt = checkpoint_path(e.name, cfg.model.path, cfg.paths.models)
    h = hashlib.sha256()
    for f in sorted(p for p in ckpt.iterdir() if p.is_file()):
        h.update(f.name.encode())
        if f.suffix == ".safetensors":
            h.update(safetensors_header(f))
        elif f.suffix in WEIGHT_SUFFIXES:
            h.update(str(f.stat().st_size).encode())
        else:  # config.json, weight index, tokenizer and processor files: small, read whole
            h.update(file_digest(f).encode())
    return f"checkpoint:{h.hexdigest()[:16]}"


def config_identity(cfg: DictConfig) -> dict:
    """The config keys that define a job's numbers (operational keys such as paths and device left out)."""
    shape = shape_of(cfg)
    return {
        **shape.identity_tag,  # a window job's key never equals an arm job's
        "model": {"name": cfg.model.name, "dtype": DTYPES[cfg.model.dtype]},
        "bench": shape.bench_identity(cfg),
        "n_items": cfg.n_items,
        "seed": cfg.seed,
        "canonical_context": cfg.canonical_context,
        "eta_floor": cfg.eta_floor,
        "max_new_tokens": cfg.max_new_tokens,
    }


def config_key(cfg: DictConfig) -> str:
    return digest(config_identity(cfg))


def identity(cfg: DictConfig, selection: Selection) -> dict:
    """The full identity of a job: config, checkpoint and data fingerprints (the shard's key is its digest)."""
    return {"config": config_identity(cfg), "checkpoint": checkpoint_fingerprint(cfg), "data": data_fingerprint(selection)}


def results_root(cfg: DictConfig) -> Path:
    """Where shards go: paths.results (KAMERA_RESULTS, else results/raw), relative to the working directory."""
    return Path(os.path.expanduser(cfg.paths.results))
