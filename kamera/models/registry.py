"""The model registry, built from ``conf/model/*.yaml``: each file's ``entry`` node is the model's
:class:`~kamera.models.entry.ModelEntry` (what it is, how it loads, which shaped-checkpoint writer it has), so a
model is declared once, in the file ``model=<name>`` selects.

Three kinds: tiny random twins (built by the config functions of :mod:`kamera.models.tiny`, CPU tests), toy
models (trained weights shipped in kamera/toy) and the paper's checkpoints. The files are read on first use
(:data:`MODELS`); a malformed one is a one-line :class:`ModelConfError` naming the file and the key. The rest of
the registry's questions live beside it, one concern a module: where a checkpoint is and which entry a checkpoint
of your own loads as (:mod:`kamera.models.checkpoints`), why a model cannot run a job
(:mod:`kamera.models.problems`), and loading one (:func:`kamera.models.load.load_model`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from kamera.discover import CONF_DIR
from kamera.models.entry import ModelEntry, resolve

MODEL_CONF = CONF_DIR / "model"
PACKAGE = Path(__file__).resolve().parent.parent  # kamera/: a toy model's ``weights`` are relative to it


class UnknownModelError(ValueError):
    """A model name the registry does not know."""


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
        elif key in ("remote_code", "from_checkpoint", "by_path") and not isinstance(value, bool):
            raise ModelConfError(f"{where}: entry.{key} must be true or false, got {value!r}")
        elif key == "chat":
            if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
                raise ModelConfError(f"{where}: entry.chat must be [header, footer] (two strings), got {value!r}")
            value = tuple(value)
        elif key in ("load_kwargs", "shaped_sources"):
            if not isinstance(value, dict) or (key == "shaped_sources" and not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
                what = "file → source strings" if key == "shaped_sources" else "a mapping"
                raise ModelConfError(f"{where}: entry.{key} must be {what}, got {value!r}")
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
    for f in sorted((PACKAGE / e.weights).glob("*")):
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()[:12]


def model_names(kind: str | None = None) -> list[str]:
    """Registered names of one kind ("tiny", "toy", "paper"), or all."""
    if kind not in (None, "tiny", "toy", "paper"):
        raise ValueError(f"kind must be 'tiny', 'toy' or 'paper', got {kind!r}")
    return [n for n, e in MODELS.items() if kind is None or e.kind == kind]


def entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise UnknownModelError(f"unknown model {name!r}; registered models: {', '.join(MODELS)}")
    return MODELS[name]
