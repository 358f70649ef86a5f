"""A paper model's checkpoint: where it is, and which registered entry a checkpoint of your own loads as.

Paper checkpoints load from a local directory only: ``path=`` or ``$KAMERA_MODELS/<repo name>``; a missing one
names the path tried and the command that fetches it (:func:`checkpoint_path`).

``model=hf model.path=DIR`` (the one ``from_checkpoint`` entry, ``conf/model/hf.yaml``) reads the family from the
checkpoint's ``model_type`` (:func:`own_entry`):

- a plain text decoder of :data:`TEXT_DECODERS` loads as transformers' causal-LM class for that type through
  :class:`~kamera.models.text.TextAdapter` (1-D RoPE on the keys, V as content);
- any other type loads with the adapter, class and load options of the registered model whose family it is
  (:func:`served_families`, derived from the ``family`` every ``conf/model`` file states: a paper model's entry
  before a tiny twin's), so registering a model of a new family serves its checkpoints by path too.

Each type is proven by the identities in ``tests/models/test_own_checkpoint.py``.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from kamera.models.entry import ModelEntry
from kamera.models.families import GGUF_TYPES, TEXT_DECODER_TYPES
from kamera.models.loading import checkpoint_config, checkpoint_model_type, is_gguf
from kamera.models.registry import MODELS, ModelConfError, entry
from kamera.models.text import TextAdapter


class CheckpointNotFoundError(FileNotFoundError):
    """A paper-scale checkpoint missing from the local models root."""


class UnsupportedCheckpointError(ValueError):
    """A checkpoint whose config.json names a model_type no adapter serves."""


# Plain text decoders model=hf serves (the family table): model_type → transformers' causal-LM class for it.
TEXT_DECODERS = {kind: MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[kind] for kind in TEXT_DECODER_TYPES}
_SERVED_FIELDS = ("attention", "adapter", "model_class", "load_kwargs", "submodule")  # what a served family lends
# Served families whose llama.cpp GGUF transformers reads into the family's own class (text only; the family
# table): a GGUF of any other served family holds no vision tower, so it stays a one-line refusal
GGUF_SERVED = GGUF_TYPES


def served_families() -> dict[str, ModelEntry]:
    """model_type → the registered entry whose adapter, class and load options a checkpoint of that type loads
    with: every entry that loads natively (an adapter, no loader of its own) and does not opt out (``by_path:
    false``), keyed by the family its conf/model file states; a paper model before a tiny twin. ModelConfError when two
    paper models of one family disagree on what they would lend."""
    out: dict[str, ModelEntry] = {}
    for e in sorted(MODELS.values(), key=lambda e: (e.kind != "paper", e.name)):
        if e.adapter is None or e.loader is not None or e.from_checkpoint or not e.by_path:
            continue
        first = out.setdefault(e.family, e)
        lend = [f for f in _SERVED_FIELDS if getattr(first, f) != getattr(e, f)]
        if e.kind == first.kind == "paper" and lend:
            raise ModelConfError(
                f"conf/model/{first.name}.yaml and {e.name}.yaml are both family {e.family} but "
                f"differ in {', '.join(lend)}: a checkpoint of that family by path would be ambiguous"
            )
    return out


def supported_model_types() -> list[str]:
    """Every model_type ``model=hf`` loads, sorted."""
    return sorted({*TEXT_DECODERS, *served_families()})


def fetch_hint(e: ModelEntry, where: str | Path) -> str:
    """The command that fetches a checkpoint (huggingface_hub's ``hf`` CLI)."""
    return f"hf download {e.hf_id} --local-dir {where}"


def _not_there(path: Path) -> str:
    """Why ``path`` is no checkpoint directory: it does not exist, it is a file, or its config.json is missing."""
    if not path.exists():
        return "it does not exist"
    return "it is a file, not a checkpoint directory" if not path.is_dir() else "config.json missing"


def checkpoint_path(name: str, path: str | Path | None = None, models_root: str | Path | None = None) -> Path:
    """Where a paper model's local checkpoint must be: ``path``, else ``<models_root or $KAMERA_MODELS>/<repo>``
    (``model=hf``: ``path``, required)."""
    e = entry(name)
    if e.from_checkpoint:
        if path is None:
            raise CheckpointNotFoundError(
                f"{name}: model.path is required (the directory save_pretrained wrote: config.json, weights, tokenizer)"
            )
        path = Path(os.path.expanduser(str(path)))
        if path.suffix == ".gguf" and path.is_file():
            return path  # a single-file GGUF checkpoint (llama.cpp / ollama): config, tokenizer and weights inside
        if not (path / "config.json").is_file():
            raise CheckpointNotFoundError(
                f"{name}: no checkpoint at {path} ({_not_there(path)}); model.path must be a transformers checkpoint "
                f"directory of a supported model_type ({', '.join(supported_model_types())}) or a .gguf file of a "
                f"text decoder ({', '.join(TEXT_DECODERS)})"
            )
        return path
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
            f"{name}: no checkpoint at {path} ({_not_there(path)}); fetch it on a machine with internet with: "
            f"{fetch_hint(e, path)}"
        )
    return path


def own_entry(name: str, path: str | Path | None = None, models_root: str | Path | None = None) -> ModelEntry:
    """The entry a model loads as. ``model=hf`` (``from_checkpoint``): family = the checkpoint's ``model_type``,
    with the adapter and class that serve it; UnsupportedCheckpointError (one line, listing the supported types)
    otherwise. Any other entry is returned as it is."""
    e = entry(name)
    if not e.from_checkpoint:
        return e
    ckpt = checkpoint_path(name, path, models_root)
    kind = checkpoint_model_type(ckpt)
    if kind in TEXT_DECODERS:
        config = checkpoint_config(ckpt)
        heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
        return dataclasses.replace(
            e,
            family=kind,
            attention="MHA" if kv in (None, heads) else "GQA",
            adapter=TextAdapter,
            model_class=TEXT_DECODERS[kind],
        )
    served = served_families()
    if kind in served and (not is_gguf(ckpt) or kind in GGUF_SERVED):
        base = served[kind]
        return dataclasses.replace(e, family=kind, **{f: getattr(base, f) for f in _SERVED_FIELDS})
    if is_gguf(ckpt):
        raise UnsupportedCheckpointError(
            f"{name}: {ckpt} is a GGUF of model_type {kind!r}; kamera reads GGUF files of text decoders only "
            f"({', '.join([*TEXT_DECODERS, *GGUF_SERVED])}): for another family, point model.path at its transformers "
            "checkpoint"
        )
    raise UnsupportedCheckpointError(
        f"{name}: {ckpt}/config.json has model_type {kind!r}, which no kamera adapter serves; "
        f"supported: {', '.join(supported_model_types())}"
    )
