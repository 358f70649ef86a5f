"""The model registry, built from ``conf/model/*.yaml``: each file's ``entry`` node is the model's
:class:`~kamera.models.entry.ModelEntry` (what it is, how it loads, which shaped-checkpoint writer it has), so a
model is declared once, in the file ``model=<name>`` selects.

Three kinds: tiny random twins (built by the config functions of :mod:`kamera.models.tiny`, CPU tests), toy
models (trained weights shipped in kamera/toy) and the paper's checkpoints, which load from a local directory
only: ``path=`` or ``$KAMERA_MODELS/<repo name>``; a missing checkpoint names the path tried and the command
that fetches it. The files are read on first use (:data:`MODELS`); a malformed one is a one-line
:class:`ModelConfError` naming the file and the key. How entries name loaders and writers:
:class:`kamera.models.entry.ModelEntry`; the loading path: :mod:`kamera.models.loading`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
import transformers as tf
import yaml

from kamera.models.base import Adapter
from kamera.models.entry import ModelEntry, resolve
from kamera.models.loading import load_native, resolve_attention, resolve_device
from kamera.models.tiny import SPECIAL_IDS, TEXT, TINY_CHAT  # noqa: F401  (re-exported: kamera.diagnostics.ttft)
from kamera.models.tokenizer import ByteTokenizer

MODEL_CONF = Path(__file__).resolve().parents[2] / "conf" / "model"


class UnknownModelError(ValueError):
    """A model name the registry does not know."""


class CheckpointNotFoundError(FileNotFoundError):
    """A paper-scale checkpoint missing from the local models root."""


class ModelConfError(ValueError):
    """A conf/model file whose ``entry`` cannot become a :class:`ModelEntry`."""


_FIELDS = {f.name: f for f in dataclasses.fields(ModelEntry) if f.name != "name"}
_REFERENCES = ("adapter", "tiny_config", "image_processor")  # "module:object", resolved when the file is read
_STRINGS = ("family", "attention", "model_class", "hf_id", "notes", "loader", "weights", "shaped", "submodule")


def _entry_from(path: Path) -> ModelEntry:
    """The :class:`ModelEntry` of one conf/model file; ModelConfError (one line, naming the file) otherwise."""
    where = f"conf/model/{path.name}"
    try:
        node = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ModelConfError(f"{where}: not valid YAML ({' '.join(str(err).split())})") from None
    if not isinstance(node, dict) or node.get("name") != path.stem:
        raise ModelConfError(f"{where}: must be a mapping with name: {path.stem}")
    raw = node.get("entry")
    if not isinstance(raw, dict):
        raise ModelConfError(f"{where}: no 'entry' mapping (the registry entry: family, attention, ...)")
    unknown = sorted(set(raw) - set(_FIELDS))
    missing = [k for k in ("family", "attention") if k not in raw]
    if unknown or missing:
        what = f"unknown key(s) {unknown}" if unknown else f"missing key(s) {missing}"
        raise ModelConfError(f"{where}: entry has {what}; known keys: {', '.join(_FIELDS)}")
    fields = {}
    for key, value in raw.items():
        if key in _REFERENCES:
            if not isinstance(value, str):
                raise ModelConfError(f"{where}: entry.{key} must be a 'package.module:name' reference, got {value!r}")
            try:
                value = resolve(value, f"{where}: entry.{key}")
            except ValueError as err:
                raise ModelConfError(str(err)) from None
        elif key in _STRINGS and not isinstance(value, str):
            raise ModelConfError(f"{where}: entry.{key} must be a string, got {value!r}")
        elif key == "remote_code" and not isinstance(value, bool):
            raise ModelConfError(f"{where}: entry.remote_code must be true or false, got {value!r}")
        elif key == "chat":
            if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
                raise ModelConfError(f"{where}: entry.chat must be [header, footer] (two strings), got {value!r}")
            value = tuple(value)
        elif key == "load_kwargs":
            if not isinstance(value, dict):
                raise ModelConfError(f"{where}: entry.load_kwargs must be a mapping, got {value!r}")
            value = tuple(value.items())
        fields[key] = value
    return ModelEntry(path.stem, **fields)


_KIND_ORDER = {"tiny": 0, "toy": 1, "paper": 2}


def read_models(conf: Path = MODEL_CONF) -> dict[str, ModelEntry]:
    """Every ``<conf>/*.yaml`` as a ModelEntry, tiny first, then toy, then paper models (by file name within a
    kind)."""
    entries = [_entry_from(p) for p in sorted(conf.glob("*.yaml"))]
    if not entries:
        raise ModelConfError(f"no model files in {conf}")
    return {e.name: e for e in sorted(entries, key=lambda e: (_KIND_ORDER[e.kind], e.name))}


class _Models(Mapping):
    """The registry: conf/model read on first access, once per process."""

    def __init__(self) -> None:
        self._entries: dict[str, ModelEntry] | None = None

    def _all(self) -> dict[str, ModelEntry]:
        if self._entries is None:
            self._entries = read_models()
        return self._entries

    def __getitem__(self, name: str) -> ModelEntry:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


MODELS: Mapping[str, ModelEntry] = _Models()


def weights_fingerprint(name: str) -> str | None:
    """sha256 (12 hex) of a model's shipped weight files, so retrained weights never reuse old rows."""
    e = entry(name)
    if e.weights is None:
        return None
    digest = hashlib.sha256()
    for f in sorted(_package_path(e.weights).glob("*")):
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:12]


def _package_path(rel: str) -> Path:
    return Path(__file__).resolve().parent.parent / rel


def model_names(kind: str | None = None) -> list[str]:
    """Registered names of one kind ("tiny", "toy", "paper"), or all."""
    if kind not in (None, "tiny", "toy", "paper"):
        raise ValueError(f"kind must be 'tiny', 'toy' or 'paper', got {kind!r}")
    return [n for n, e in MODELS.items() if kind is None or e.kind == kind]


def entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise UnknownModelError(f"unknown model {name!r}; registered models: {', '.join(MODELS)}")
    return MODELS[name]


def fetch_hint(e: ModelEntry, where: str | Path) -> str:
    """The command that fetches a checkpoint (huggingface_hub's ``hf`` CLI)."""
    return f"hf download {e.hf_id} --local-dir {where}"


def checkpoint_path(name: str, path: str | Path | None = None, models_root: str | Path | None = None) -> Path:
    """Where a paper model's local checkpoint must be: ``path``, else ``<models_root or $KAMERA_MODELS>/<repo>``."""
    e = entry(name)
    if e.hf_id is None:
        raise ValueError(f"{name} is a {e.kind} model; it has no checkpoint")
    if path is None:
        root = models_root or os.environ.get("KAMERA_MODELS")
        if not root:
            raise CheckpointNotFoundError(
                f"{name}: no checkpoint path given and KAMERA_MODELS is not set; set KAMERA_MODELS to the directory "
                f"holding {e.repo_dir}/ (fetch it with: {fetch_hint(e, '$KAMERA_MODELS/' + e.repo_dir)})"
            )
        path = Path(root) / e.repo_dir
    path = Path(path)
    if not (path / "config.json").is_file():
        raise CheckpointNotFoundError(
            f"{name}: no checkpoint at {path} (config.json missing); fetch it on a machine with internet with: "
            f"{fetch_hint(e, path)}"
        )
    return path


def model_problems(name: str, path: str | Path | None = None, models_root: str | Path | None = None) -> list[str]:
    """Why ``name`` cannot load, found without loading anything (empty when it can): an unknown name, a paper
    model with no adapter yet (said first: fetching its checkpoint would not help), a missing checkpoint."""
    try:
        e = entry(name)
    except UnknownModelError as err:
        return [str(err)]
    if e.kind != "paper":
        return []
    problems = []
    if not e.has_adapter:
        problems.append(f"model {name} ({e.family}) has no adapter yet: {e.notes or 'unverified family'}")
    try:
        checkpoint_path(name, path, models_root)
    except CheckpointNotFoundError as err:
        problems.append(str(err))
    return problems


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    return DTYPES[dtype]


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
) -> Adapter:
    """Build (tiny) or load (toy, paper) a registered model and wrap it in its family adapter.

    ``device``: "cpu", "cuda", "cuda:1", … or "auto" (all visible GPUs through accelerate's
    ``device_map="auto"``, so a model larger than one GPU spreads over a node; the CPU without CUDA).
    ``attn_implementation``: "sdpa", "eager", "flash_attention_2" or "auto" (flash-attention 2 on CUDA
    when installed, else sdpa); forwards under a 4D mask always run a kernel that takes one.
    """
    e = entry(name)
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
            path=_package_path(e.weights), dtype=dtype, device=_one_device(device), attn_implementation=attn,
        )
    ckpt = checkpoint_path(name, path, models_root)
    if not e.has_adapter:
        raise NotImplementedError(
            f"{name} ({e.family}) is registered but has no adapter yet ({e.notes or 'its cache/vision path is unverified'}); "
            f"checkpoint found at {ckpt}"
        )
    if e.loader is not None:
        return resolve(e.loader, f"{name} loader")(ckpt, dtype=dtype, device=device, attn_implementation=attn)
    return load_native(e, ckpt, dtype=dtype, device=device, attn_implementation=attn)
