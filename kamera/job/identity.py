"""A job's identity, the key of its results shard (:mod:`kamera.job.store`):

    config      model name, dtype (canonical spelling), benchmark name / subsets / split / kwargs (as the item
                shape spells them out), n_items, seed, canonical_context, eta_floor, max_new_tokens, and
                :data:`KEYED_OFF_DEFAULT`'s options where set off their defaults (a pure function of the composed
                config: status and renderers find a job's shard by it without data or weights)
    checkpoint  a fingerprint of the checkpoint actually loaded: for a paper model its config.json,
                tokenizer / processor files, the safetensors headers and each weight file's sha256
                (:func:`weights_sha256`: computed once from the bytes, then tied to the file's size, inode,
                mtime_ns and ctime_ns; the Hub's download record only checked against it) of the directory
                resolved from model.path or KAMERA_MODELS; for a tiny model the config it is built from;
                for a toy model the hash of its shipped weights
    data        a fingerprint of the data actually read: the annotation files the loader opened, the
                ids of the selected items and, when they read media files, the sha256 of every image,
                video and PDF a selected item reads (computed once per file and cached by size, inode,
                mtime_ns and ctime_ns in the media cache's ``digests/``)

so a second copy of a benchmark, re-extracted images or a re-encoded video, a repaired medium, another
checkpoint directory or new weights in the same one is a different job, never a silent reuse, while
byte-identical copies share results. Arms and probes are not part of it (rows are keyed by item and
arm within the shard). docs/identity.md says what each part covers.

    python -m kamera.job.identity --rehash DIR [DIR …]   # recompute (and re-record) the weights' digests
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import struct
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from kamera.data.media import (
    WEIGHT_SUFFIXES,
    cache_root,
    cached_sha256,
    content_digest,
    digest_store,
    sha256_file,
    weight_files,
)
from kamera.items.selection import Selection
from kamera.job.shapes import shape_of
from kamera.job.spec import DTYPES
from kamera.provenance import digest

log = logging.getLogger("kamera.job")


def file_digest(path: Path) -> str:
    """sha256 (16 hex) of a small file's bytes (annotations, configs, tokenizer files): read every time."""
    return sha256_file(path)[:16]

def safetensors_header(path: Path) -> bytes:
    """The JSON header of a .safetensors file (tensor names, dtypes, shapes, offsets; no weights): its 8-byte
    little-endian length, then that many bytes; the one reader of it (the fingerprint hashes the bytes, preflight's
    :func:`kamera.job.checks.safetensors_tensors` parses them). ValueError when the file is shorter than either."""
    size = path.stat().st_size
    if size < 8:
        raise ValueError(f"truncated ({size} bytes)")
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        if n > size - 8:
            raise ValueError(f"its header length ({n} bytes) exceeds the file ({size} bytes): truncated or not "
                             "safetensors")
        return fh.read(n)


SHA256 = re.compile(r"[0-9a-f]{64}")


def hub_record(ckpt: Path, name: str) -> tuple[str, str] | None:
    """(commit, sha256) the Hub recorded for ``ckpt/name`` when ``hf download --local-dir ckpt`` fetched it, or None.

    huggingface_hub keeps, per downloaded file, ``<local_dir>/.cache/huggingface/download/<name>.metadata``:
    three lines, the commit hash, the etag and the time the metadata was written
    (``huggingface_hub/_local_folder.py``: ``get_local_download_paths`` and ``read_download_metadata``, as of
    huggingface_hub 2.4). For an LFS file (every weight file) the etag is the file's sha256; a regular file's
    is its git blob hash, which is not used. It says what was downloaded, not what is there now (weights put in
    place with ``cp -p``, ``mv``, ``rsync -t`` or an untarred fine-tune keep an mtime older than the record): a
    hint :func:`weights_sha256` checks against the bytes, never a substitute for them. Read here without
    huggingface_hub, whose reader creates folders and a lock file (a read-only checkpoint would fail)."""
    record = ckpt / ".cache" / "huggingface" / "download" / f"{name}.metadata"
    try:
        commit, etag = record.read_text().splitlines()[:2]
    except (OSError, ValueError):
        return None
    etag = etag.strip().strip('"').lower()
    return (commit.strip(), etag) if SHA256.fullmatch(etag) else None


def hub_mismatch(ckpt: Path, name: str, sha: str) -> str | None:
    """One line when ``ckpt/name``'s sha256 ``sha`` is not what the Hub recorded for its download, else None."""
    hub = hub_record(ckpt, name)
    if hub is None or hub[1] == sha:
        return None
    return (f"{ckpt / name}: its sha256 {sha[:16]} differs from the Hub's record of its download ({hub[1][:16]}, "
            f"commit {hub[0][:12]}): the file was replaced after `hf download`; jobs identify it by its bytes")


_warned: set[str] = set()


def weights_sha256(ckpt: Path, name: str, rehash: bool = False) -> str:
    """The sha256 of weight file ``ckpt/name``, from its bytes: read whole at first use and recorded by kamera
    under :func:`digest_store` with the file's (size, inode, mtime_ns, ctime_ns)
    (:func:`kamera.data.media.cached_sha256`); later jobs only ``stat`` it, and any change to the file (a copy,
    move, untar, rsync, a rewrite that restores its mtime: each sets a new ctime) reads it again. The Hub's
    download record (:func:`hub_record`) is checked against it and a mismatch logged once, never used instead.
    ``rehash`` recomputes from the bytes (``python -m kamera.job.identity --rehash DIR``)."""
    sha = cached_sha256(ckpt / name, digest_store(ckpt), rehash=rehash)
    if (why := hub_mismatch(ckpt, name, sha)) and why not in _warned:
        _warned.add(why)
        log.warning("warning: %s", why)
    return sha


def _relative(f: Path, root: Path | None) -> str:
    return str(f.relative_to(root) if root and f.is_relative_to(root) else f)


def media_fingerprint(media: list[Path], root: Path | None) -> str:
    """A digest of (path relative to the benchmark root, sha256) of every media file the selected items read;
    each file's sha256 is read whole once, then cached by (size, inode, mtime_ns, ctime_ns) under the media cache
    (:func:`kamera.data.media.content_digest`), so an unchanged benchmark costs a ``stat`` per file."""
    store = cache_root(root)

    def sha(f: Path) -> str:
        try:
            return content_digest(f, store)
        except OSError as err:  # a missing or unreadable medium fails its item later; here it is named as such
            return f"unreadable: {type(err).__name__}"

    return digest({_relative(f, root): sha(f) for f in sorted(set(media))})


def data_fingerprint(selection: Selection) -> dict:
    """sha256 of each annotation file read (relative to the benchmark root), of the selected ids and, when the
    selected items read media files (``Selection.media``), of those media (:func:`media_fingerprint`;
    absent otherwise, so a benchmark without media files keeps the key it had before media were covered)."""
    files = {_relative(f, selection.root): file_digest(f) for f in sorted(set(selection.files))}
    out = {"files": files, "items": digest(selection.ids)}
    if selection.media:
        out["media"] = media_fingerprint(selection.media, selection.root)
    return out


def checkpoint_fingerprint(cfg: DictConfig) -> str:
    """What identifies the model a job loads (see the module docstring). A paper checkpoint's weights are read
    whole once per file; later jobs only ``stat`` them."""
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
    if ckpt.is_file():  # one GGUF file: config, tokenizer and weights in it
        h.update(f"{ckpt.name}\0{ckpt.stat().st_size}\0{weights_sha256(ckpt.parent, ckpt.name)}".encode())
        return f"checkpoint:{h.hexdigest()[:16]}"
    for f in sorted(p for p in ckpt.iterdir() if p.is_file()):
        h.update(f.name.encode())
        if f.suffix == ".safetensors":
            h.update(safetensors_header(f))
            h.update(weights_sha256(ckpt, f.name).encode())
        elif f.suffix in WEIGHT_SUFFIXES:
            h.update(str(f.stat().st_size).encode())
            h.update(weights_sha256(ckpt, f.name).encode())
        else:  # config.json, weight index, tokenizer and processor files: small, read whole
            h.update(file_digest(f).encode())
    return f"checkpoint:{h.hexdigest()[:16]}"


def _model_identity(cfg: DictConfig) -> dict:
    """The model's part of the config key: name and dtype; for ``model=hf`` also the checkpoint (its resolved path),
    so several checkpoints of your own in one group are several configs (status and renderers tell them apart)."""
    from kamera.models.registry import MODELS

    out = {"name": cfg.model.name, "dtype": DTYPES[cfg.model.dtype]}
    e = MODELS.get(cfg.model.name)  # an unknown name is preflight's to report
    if cfg.model.path is not None and e is not None and e.from_checkpoint:
        out["checkpoint"] = str(Path(os.path.expanduser(str(cfg.model.path))).resolve())
    return out


# Options added after jobs were first keyed: (key name, config path, default). Each enters the key only when set off
# its default, so every job stored before the option existed keeps its key. A new option that changes numbers goes
# here (an option that was always keyed stays in config_identity's own dict).
KEYED_OFF_DEFAULT: tuple[tuple[str, str, object], ...] = (
    ("scoring", "scoring", "logits"),
    ("chat", "model.chat", "template"),
    ("item_offset", "item_offset", 0),
)


def config_identity(cfg: DictConfig) -> dict:
    """The config keys that define a job's numbers (operational keys such as paths and device left out)."""
    shape = shape_of(cfg)
    off_default = {name: value for name, path, default in KEYED_OFF_DEFAULT
                   if (value := OmegaConf.select(cfg, path, default=default)) != default}
    return {
        **shape.identity_tag,  # a window job's key never equals an arm job's
        "model": _model_identity(cfg),
        "bench": shape.bench_identity(cfg),
        "n_items": cfg.n_items,
        "seed": cfg.seed,
        "canonical_context": cfg.canonical_context,
        "eta_floor": cfg.eta_floor,
        "max_new_tokens": cfg.max_new_tokens,
        **off_default,
    }


def config_key(cfg: DictConfig) -> str:
    return digest(config_identity(cfg))


def identity(cfg: DictConfig, selection: Selection) -> dict:
    """The full identity of a job: config, checkpoint and data fingerprints, and what its item shape's runtime adds
    (an engine job's library versions and attention backend; nothing for the harness's jobs); the shard's key is
    its digest."""
    return {"config": config_identity(cfg), "checkpoint": checkpoint_fingerprint(cfg),
            "data": data_fingerprint(selection), **shape_of(cfg).runtime_identity(cfg)}


def rehash(dirs: list[str]) -> int:
    """Recompute the sha256 of every weight file of each checkpoint directory and re-record it (what the next job
    uses); a digest that disagrees with the Hub's download record (the file was replaced after the download) is an
    error line each, and the exit status is 1."""
    bad = 0
    for d in map(Path, dirs):
        if not d.is_dir():
            print(f"{d}: not a directory", file=sys.stderr)
            bad += 1
            continue
        for f in weight_files(d):
            t = time.perf_counter()
            sha = cached_sha256(f, digest_store(d), rehash=True)
            print(f"{f}: sha256 {sha} ({f.stat().st_size / 2**30:.2f} GiB in {time.perf_counter() - t:.1f} s)")
            if why := hub_mismatch(d, f.name, sha):
                print(f"error: {why}", file=sys.stderr)
                bad += 1
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kamera.job.identity",
                                 description="Recompute the cached sha256 of a checkpoint's weight files.")
    ap.add_argument("--rehash", nargs="+", metavar="DIR", required=True, help="checkpoint directories")
    return rehash(ap.parse_args(argv).rehash)


if __name__ == "__main__":
    sys.exit(main())
