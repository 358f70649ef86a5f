"""Shaped checkpoints: each paper model's real configuration, tokenizer and file layout with random weights and
a few layers, loadable exactly as the real checkpoint (``load_model(name, models_root=…)``).

    python -m kamera.models.shaped qwen2_5_vl_7b --out /tmp/models          # writes /tmp/models/Qwen2.5-VL-7B-Instruct/
    python -m kamera.models.shaped all --out /tmp/models --tokenizers DIR    # every paper model with a writer

Specs are one function per family (``ModelEntry.shaped``: ``fn(model, sources) -> ShapedSpec``), fed each model's
published config (``configs/<model>.json``) and its file's ``shaped_sources``; :func:`ensure` keeps one copy per (model,
layers, vision layers, seed, writer spec, real-or-stand-in tokenizer) in a cache folder, so tests and rehearsals build
each once.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata as md
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from kamera.models.entry import resolve
from kamera.models.registry import entry, model_names
from kamera.models.shaped.writer import ShapedSpec, writer_for


def shaped_models() -> list[str]:
    """Registered paper models that have a shaped-checkpoint writer."""
    return [n for n in model_names("paper") if entry(n).shaped]


@functools.cache
def shaped_spec(name: str) -> ShapedSpec:
    """The model's :class:`ShapedSpec`: its family's spec (``entry.shaped``, ``fn(model, sources)``) for its published
    config and its file's ``shaped_sources``; ValueError if it has none (or the family's function returns another
    model's spec)."""
    e = entry(name)
    if e.kind != "paper":
        raise ValueError(f"{name} is a {e.kind} model; shaped checkpoints are written for paper models")
    if not e.shaped:
        raise ValueError(f"{name} has no shaped-checkpoint writer registered ({e.notes or 'no adapter yet'}); "
                         f"models with one: {', '.join(shaped_models())}")
    spec = resolve(e.shaped, f"{name} shaped writer")(name, dict(e.shaped_sources))
    if not isinstance(spec, ShapedSpec) or spec.model != name:
        raise ValueError(f"{name}: {e.shaped} returned {type(spec).__name__} for {getattr(spec, 'model', None)!r}, "
                         f"not the ShapedSpec of {name}")
    return spec


def shaped_writer(name: str) -> Callable[..., Path]:
    """The model's writer ``fn(out, *, layers, vision_layers, seed) -> Path`` (its spec: ``.spec``); ValueError if it
    has none."""
    return writer_for(shaped_spec(name))


def writer_digest() -> str:
    """``writer-<12 hex>``: a digest of the writers' code (this package and the stand-in tokenizers they put in)
    and the torch / transformers / safetensors / tokenizers versions they build with. :func:`cache_key` covers
    each spec's data, not the code that writes it; a cache folder per writer digest covers the rest."""
    h, here = hashlib.sha256(), Path(__file__).parent
    files = [p for p in here.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    files.append(here.parent / "standin_tokenizer.py")
    for p in sorted(files):
        h.update(f"{p.relative_to(here.parent)}\0".encode() + p.read_bytes())
    h.update(" ".join(f"{d}=={md.version(d)}" for d in ("torch", "transformers", "safetensors", "tokenizers")).encode())
    return f"writer-{h.hexdigest()[:12]}"


def default_cache() -> Path:
    """``$KAMERA_SHAPED``, else ``<base>/<writer digest>`` with base ``$KAMERA_CACHE/shaped`` or
    ``~/.cache/kamera/shaped`` (``python -c 'from kamera.models.shaped import default_cache; print(default_cache())'``
    tells where; ``make test*`` and CI keep their shaped checkpoints there)."""
    if os.environ.get("KAMERA_SHAPED"):
        return Path(os.environ["KAMERA_SHAPED"])
    base = Path(os.environ["KAMERA_CACHE"]) / "shaped" if os.environ.get("KAMERA_CACHE") else \
        Path.home() / ".cache" / "kamera" / "shaped"
    return base / writer_digest()


def tokenizer_base(name: str) -> str | None:
    """The folder of real tokenizer files the model's writer reads under ``$KAMERA_TOKENIZERS`` ("qwen2",
    "llama2"), or None when it always writes a stand-in (Kimi-VL, DeepSeek-VL, SmolVLM2)."""
    return shaped_spec(name).tokenizer.base


def cache_key(name: str, layers: int, vision_layers: int, seed: int) -> str:
    """``<model>-L<layers>-V<vision>-s<seed>-<digest>``: the digest covers what the writer writes (its spec's
    fingerprint) and whether the real tokenizer files are given, so a changed writer or tokenizer never
    reuses an old copy."""
    base = tokenizer_base(name)
    tokens = os.environ.get("KAMERA_TOKENIZERS") or ""
    real = bool(base and tokens and (Path(tokens) / base / "tokenizer.json").is_file())
    digest = hashlib.sha256(f"{shaped_spec(name).fingerprint()}|{real}".encode()).hexdigest()[:10]
    return f"{name}-L{layers}-V{vision_layers}-s{seed}-{digest}"


def ensure(
    name: str, root: str | Path | None = None, *, layers: int = 2, vision_layers: int = 2, seed: int = 0
) -> Path:
    """A models root holding the shaped ``name`` as ``<root>/<key>/<repo dir>``, written once (under a file
    lock, so concurrent callers wait rather than write twice; ``shaped.json`` marks a complete copy, and anything
    else there — a killed writer's staging directory — is removed first); returns ``<root>/<key>``."""
    root = Path(root) if root is not None else default_cache()
    home = root / cache_key(name, layers, vision_layers, seed)
    ckpt = home / entry(name).repo_dir
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (ckpt / "shaped.json").is_file():
            for stale in [ckpt, *home.glob(f".{ckpt.name}.tmp-*")]:  # not finished: never reused
                shutil.rmtree(stale, ignore_errors=True)
            shaped_writer(name)(ckpt, layers=layers, vision_layers=vision_layers, seed=seed)
    return home


def models_root(names: Iterable[str], out: str | Path, cache: str | Path | None = None, **kw) -> Path:
    """One models root ``out`` with a link ``<out>/<repo dir>`` to each model's cached shaped checkpoint."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        repo = entry(name).repo_dir
        link = out / repo
        target = ensure(name, cache, **kw) / repo
        if link.is_symlink() or link.exists():
            if link.resolve() == target.resolve():
                continue
            link.unlink()
        link.symlink_to(target.resolve(), target_is_directory=True)
    return out
