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
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import torch
import transformers as tf
import yaml

from kamera.models.base import Adapter
from kamera.models.entry import ModelEntry, resolve
from kamera.models.loading import (
    CHAT_MODES,
    has_chat_template,
    is_gguf,
    load_native,
    read_json,
    resolve_attention,
    resolve_device,
)
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
        elif key in ("remote_code", "from_checkpoint") and not isinstance(value, bool):
            raise ModelConfError(f"{where}: entry.{key} must be true or false, got {value!r}")
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
                f"{name}: no checkpoint at {path} (config.json missing); model.path must be a transformers checkpoint "
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
            f"{name}: no checkpoint at {path} (config.json missing); fetch it on a machine with internet with: "
            f"{fetch_hint(e, path)}"
        )
    return path


# ----- your own checkpoint (model=hf model.path=DIR) ------------------------------------------------------
# Plain text decoders: model_type → the transformers class; kamera's TextAdapter serves each (1-D RoPE on the
# keys, V as content). Each is proven by the identities in tests/models/test_own_checkpoint.py.
TEXT_DECODERS = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
}
# Families a registered model's adapter serves: model_type → the registered model whose adapter, class and load
# options a checkpoint of that type loads with (tested through a checkpoint written from its tiny twin, or through
# its shaped checkpoint where it has no twin: tests/models/test_own_checkpoint.py).
VL_FAMILIES = {
    "qwen2_5_vl": "qwen2_5_vl_7b",
    "qwen3_vl": "qwen3_vl_8b",
    "llava": "llava_1_5_7b",
    "deepseek_v2": "tiny_deepseek_v2",
    "internvl": "internvl3_8b",
    "smolvlm": "smolvlm2",
    "deepseek_vl_hybrid": "deepseek_vl_7b",
    "deepseek_vl": "tiny_deepseek_vl",
    "qwen3_omni_moe": "qwen3_omni_30b_a3b",
    "qwen2_5_omni": "qwen2_5_omni_7b",
    "qwen3_5": "gdn_hybrid",
    "gemma3n": "gemma3n_e4b",
}


class UnsupportedCheckpointError(ValueError):
    """A checkpoint whose config.json names a model_type no adapter serves."""


def supported_model_types() -> list[str]:
    """Every model_type ``model=hf`` loads, sorted."""
    return sorted({*TEXT_DECODERS, *VL_FAMILIES})


def gguf_config(path: Path) -> dict:
    """The transformers config a GGUF file's metadata gives (``model_type`` from ``general.architecture``, the
    sizes from its ``<arch>.*`` keys), read by transformers' own GGUF reader without dequantising any tensor
    (``transformers/modeling_gguf_pytorch_utils.py:load_gguf_checkpoint``). ValueError naming the file when the
    ``gguf`` package is missing or the file is not a GGUF transformers can read."""
    try:
        import gguf  # noqa: F401  (transformers' reader needs it; say so here rather than deep in a load)
    except ImportError as err:
        raise ValueError(f"{path}: reading a GGUF checkpoint needs the gguf package (pip install gguf)") from err
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        return dict(load_gguf_checkpoint(str(path), return_tensors=False)["config"])
    except Exception as err:  # a truncated file, another magic, an architecture transformers cannot map
        raise ValueError(f"{path}: not a GGUF checkpoint transformers can read ({type(err).__name__}: {err})") from err


def checkpoint_config(ckpt: str | Path) -> dict:
    """The checkpoint's config: config.json, or a GGUF file's metadata (:func:`gguf_config`)."""
    return gguf_config(Path(ckpt)) if is_gguf(ckpt) else read_json(Path(ckpt) / "config.json")


def checkpoint_model_type(ckpt: str | Path) -> str | None:
    """The ``model_type`` a checkpoint's config states (None when it states none); ValueError naming the
    file when it is not valid JSON (or not a readable GGUF)."""
    kind = checkpoint_config(ckpt).get("model_type")
    return kind if isinstance(kind, str) and kind else None


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
        from kamera.models.text import TextAdapter

        config = checkpoint_config(ckpt)
        heads, kv = config.get("num_attention_heads"), config.get("num_key_value_heads")
        return dataclasses.replace(e, family=kind, attention="MHA" if kv in (None, heads) else "GQA",
                                   adapter=TextAdapter, model_class=TEXT_DECODERS[kind])
    if kind in VL_FAMILIES and not is_gguf(ckpt):
        base = entry(VL_FAMILIES[kind])
        return dataclasses.replace(e, family=kind, attention=base.attention, adapter=base.adapter,
                                   model_class=base.model_class, load_kwargs=base.load_kwargs, submodule=base.submodule)
    if is_gguf(ckpt):
        raise UnsupportedCheckpointError(
            f"{name}: {ckpt} is a GGUF of model_type {kind!r}; kamera reads GGUF files of text decoders only "
            f"({', '.join(TEXT_DECODERS)}): for another family, point model.path at its transformers checkpoint"
        )
    raise UnsupportedCheckpointError(
        f"{name}: {ckpt}/config.json has model_type {kind!r}, which no kamera adapter serves; "
        f"supported: {', '.join(supported_model_types())}"
    )


def reads_images(e: ModelEntry) -> bool:
    """Whether a model takes image (and video) parts: its adapter has a vision path (an entry without one, a toy
    model's loader: unless its family is a text decoder's)."""
    if e.adapter is not None:
        return e.adapter._pixels is not Adapter._pixels
    return e.family != "text" and e.family not in TEXT_DECODERS


def family_mismatch(e: ModelEntry, ckpt: Path) -> str | None:
    """Why a registered paper model cannot load ``ckpt``: its config.json's model_type is not the entry's family
    (None when it is). Said before any weights load: the entry's class would otherwise build from a config of
    another family (a default-size model, or a silent misread)."""
    try:
        kind = checkpoint_model_type(ckpt)
    except ValueError as err:
        return f"{e.name}: {err}"
    if kind is None or kind == e.family:  # no model_type: nothing to compare (transformers names what is missing)
        return None
    hint = f"; to run it as your own checkpoint use model=hf model.path={ckpt}" if kind in supported_model_types() else ""
    return f"{e.name}: the checkpoint at {ckpt} has model_type {kind!r}, not {e.family!r} (the family {e.name} loads){hint}"


def model_problems(name: str, path: str | Path | None = None, models_root: str | Path | None = None,
                   chat: str = "template") -> list[str]:
    """Why ``name`` cannot load, found without loading anything (empty when it can): an unknown name, a path on a
    built-in (tiny or toy) model, a paper model with no adapter yet (said first: fetching its checkpoint would not
    help), a missing checkpoint, a checkpoint whose ``model_type`` is not the entry's family (``model=hf``: one no
    adapter serves), an unknown ``chat`` mode, or (``model=hf``) a checkpoint without a chat template unless
    ``chat`` is "none"."""
    if chat not in CHAT_MODES:
        return [f"model.chat={chat!r}: must be one of {', '.join(CHAT_MODES)}"]
    try:
        e = entry(name)
    except UnknownModelError as err:
        return [str(err)]
    if e.kind != "paper":
        if path is not None:
            return [f"model.path={path}: {name} is a built-in {e.kind} model and loads no checkpoint; to run a "
                    f"checkpoint of your own use model=hf model.path={path}"]
        return []
    problems = []
    if not e.has_adapter:
        problems.append(f"model {name} ({e.family}) has no adapter yet: {e.notes or 'unverified family'}")
    try:
        ckpt = checkpoint_path(name, path, models_root)
    except CheckpointNotFoundError as err:
        return [*problems, str(err)]
    if e.from_checkpoint:
        try:
            own_entry(name, ckpt)
        except (UnsupportedCheckpointError, ValueError) as err:
            return [*problems, str(err)]
        if chat == "template" and not has_chat_template(ckpt):
            problems.append(f"{name}: {ckpt} has no chat template (chat_template.jinja, tokenizer_config.json's "
                            f"chat_template, or a GGUF's tokenizer.chat_template); model.chat=none runs it without one")
    elif e.has_adapter and (problem := family_mismatch(e, ckpt)):
        problems.append(problem)
    return problems


def image_problems(name: str, path: str | Path | None, bench: str, items: Iterable[Callable[[], list]]) -> list[str]:
    """Why a text-only model cannot read a benchmark's items (empty when it can): one of ``items`` (each an item's
    ``spans`` builder, called only when the model is text-only) holds image or video parts. One line naming the
    benchmark and the model."""
    try:
        e = own_entry(name, path)
    except (UnknownModelError, CheckpointNotFoundError, ValueError):
        return []  # said by model_problems
    if reads_images(e):
        return []
    for spans in items:
        media = sorted({type(p).__name__ for s in spans() for p in s.parts if not isinstance(p, str)})
        if media:
            break
    else:
        return []
    what = f"{name} ({e.family}, {Path(path).name})" if e.from_checkpoint and path else f"{name} ({e.family})"
    why = getattr(e.adapter, "text_only_reason", "")  # a family served without its vision tower says why
    return [f"bench={bench} has {' and '.join('video' if m == 'Clip' else 'image' for m in media)} chunks, but model "
            f"{what} is text-only{f' here ({why})' if why else ''}: run it on a text benchmark, or pick a model that "
            "reads images"]


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
            path=_package_path(e.weights), dtype=dtype, device=_one_device(device), attn_implementation=attn,
        )
    ckpt = checkpoint_path(name, path, models_root)
    if not e.has_adapter:
        raise NotImplementedError(
            f"{name} ({e.family}) is registered but has no adapter yet ({e.notes or 'its cache/vision path is unverified'}); "
            f"checkpoint found at {ckpt}"
        )
    if e.from_checkpoint:
        e = own_entry(name, ckpt)
    elif problem := family_mismatch(e, ckpt):
        raise UnsupportedCheckpointError(problem)
    if e.loader is not None:
        return resolve(e.loader, f"{name} loader")(ckpt, dtype=dtype, device=device, attn_implementation=attn)
    return load_native(e, ckpt, dtype=dtype, device=device, attn_implementation=attn, chat=chat)
