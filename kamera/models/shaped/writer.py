"""Writing a shaped checkpoint: a paper model's real configuration and file layout, random weights, few layers.

A :class:`ShapedSpec` holds what a model publishes on the Hub, as data: its ``config.json`` (every
number the model has, with the layer counts the shaped copy replaces), its processor files, its chat
template and how to build its tokenizer. :func:`write` turns a spec into a directory that
``load_model(name, models_root=…)`` loads exactly as it would load the real checkpoint:

- ``config.json``: the published config with ``layers`` decoder and ``vision_layers`` vision-tower
  layers (indices that name vision layers — full-attention blocks, deepstack taps — are remapped into
  the shortened tower, see each spec's ``remap``);
- ``model-0000i-of-0000n.safetensors`` + ``model.safetensors.index.json``: random weights under the
  checkpoint's own tensor names (transformers' ``revert_weight_conversion`` gives the Hub names, e.g.
  per-expert MoE tensors), in the dtype the config states, sharded at ``SHARD_BYTES``;
- ``generation_config.json``, the (video) preprocessor configs, ``processor_config.json``,
  ``chat_template.jinja`` and the tokenizer files;
- ``shaped.json``: what was shaped, the seed, the spec's sources and which tokenizer was used (the
  completeness marker: it is written last, inside the staging directory, see :func:`staged`).

The published JSON files are data under ``configs/``, read by :func:`published_json` (the one reader):
``configs/<model>.json`` is the model's ``config.json`` and ``configs/<model>/<file>`` each other JSON file its
checkpoint ships (``generation_config.json``, ``preprocessor_config.json``, ``video_preprocessor_config.json``,
``processor_config.json``, ``tokenizer_config.json`` without its chat template), as the writer writes it. Each file
is stated once: a family's spec builder names the checkpoint whose files it writes (so a new model of the family,
its YAML and its ``config.json``, gets them too; the Qwen3.5 builder writes Qwen3-VL-8B's preprocessor config, the
Qwen VL and Omni builders Qwen2.5-VL-7B's generation and tokenizer configs), and what a builder computes (a value from
the config, a model's extra tokens) stays code, over the file's literal part. The remote-code models' adapter modules
read their preprocessor configs from here too (``HUB_PREPROCESSOR``).

Checkpoints whose model class exists only as remote code on the Hub (Kimi-VL, Phi-3.5-V) cannot be built
from transformers: their spec gives the tensor layout as a function of the shaped config (``layout``, the
adapter module's own list of Hub names, the same list its loader checks against). Everything else — the
config, the files, the tokenizer, the random values, the staging and the manifest — is this module's,
for every model.

Random values: every weight tensor gets random sign and mantissa at one fixed exponent
(|w| ∈ [1/64, 1/32), standard deviation ≈ 0.024, like the usual N(0, 0.02) init), drawn from a
generator seeded by the tensor's name, four times faster than a normal draw at these sizes; norm
weights are 1 and biases 0. The operator's identities hold for any weights; these only need to be
generic.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers as tf
from safetensors.torch import save_file

from kamera.models.standin_tokenizer import write_standin_tokenizer

SHARD_BYTES = 2 << 30
CONFIGS = Path(__file__).resolve().parent / "configs"  # each paper model's published JSON files, as data
VERSION = 3  # bump when the writer's output changes, so cached shaped checkpoints are rebuilt
NORM = re.compile(r"(norm|layernorm|layer_norm|ln_q|ln_post|ln_pre|(^|\.)ln\d?)[^.]*\.weight$")


def published_json(model: str, file: str = "config.json") -> dict:
    """The JSON ``file`` the model's checkpoint publishes on the Hub, as data: ``configs/<model>.json`` for its
    ``config.json`` (every number the model has, the layer counts included: read by its family's
    :class:`ShapedSpec`, the cost model and the remote-code loaders), ``configs/<model>/<file>`` for the others
    (generation, processor and tokenizer configs, read by the family spec builders; module docstring)."""
    path = CONFIGS / f"{model}.json" if file == "config.json" else CONFIGS / model / file
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        what = "config" if file == "config.json" else file
        raise FileNotFoundError(f"{model}: no published {what} at {path}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


# the depth keys of a checkpoint with a text_config and a vision_config (LLaVA, InternVL, SmolVLM, Kimi-VL)
VLM_LAYERS = {"text_layers": ("text_config.num_hidden_layers",), "vision_layers": ("vision_config.num_hidden_layers",)}
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "generation_config.json")


def generation_ids(config: dict) -> dict:
    """The generation config a remote-code checkpoint ships: its text config's bos / eos / pad ids."""
    return {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}


def published_files(model: str, files: tuple[str, ...] = PROCESSOR_FILES) -> dict[str, dict]:
    """Each of ``files`` the model's checkpoint publishes (:func:`published_json`), by name: a spec's ``files``."""
    return {f: published_json(model, f) for f in files}


@dataclass(frozen=True)
class TokenizerSpec:
    """How a shaped checkpoint's tokenizer is built.

    ``base``: a folder name of real tokenizer files ("qwen2", "llama2") or None for a stand-in.
    ``keep_below``: added tokens of the real file kept (ids below it); ``specials`` (token → id) are
    added at their real ids. ``vocab_size`` is the model's embedding size (the stand-in's size).
    ``config`` is the tokenizer_config.json the model publishes (without its template).
    ``base_specials`` stand in for the real file's own special tokens when it is absent.
    """

    base: str | None
    vocab_size: int
    specials: dict[str, int]
    config: dict
    keep_below: int | None = None
    base_specials: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ShapedSpec:
    """One paper model as published: config, processor files, chat template, tokenizer, and their sources.

    The tensors written are those of ``model_class`` (a transformers class) built on ``meta`` from the
    shaped config, under the checkpoint's Hub names; or, when the class is remote code, ``layout(cfg,
    vision_layers)`` — (Hub name, shape) pairs in the config's dtype — with ``model_class`` empty.
    ``fixed(cfg)`` gives tensors whose values are not random (Kimi-VL's stored rotary ``inv_freq``, which
    its loader checks against ``rope_theta``). ``shard_bytes`` caps a shard; ``min_vision_layers`` is the
    fewest vision layers the model can run with.
    """

    model: str
    model_class: str
    config: dict
    sources: dict[str, str]
    text_layers: tuple[str, ...]
    vision_layers: tuple[str, ...]
    files: dict[str, dict]
    chat_template: str
    tokenizer: TokenizerSpec
    remap: Callable[[dict, int, int], None] | None = None
    build_overrides: dict = field(default_factory=dict)  # config attributes set only to build the weights
    omitted: str = ""  # parts of the published checkpoint whose tensors are not written, and why
    layout: Callable[[dict, int], list[tuple[str, tuple[int, ...]]]] | None = None
    fixed: Callable[[dict], dict[str, torch.Tensor]] | None = None
    shard_bytes: int = SHARD_BYTES
    min_vision_layers: int = 1

    def shaped_config(self, layers: int, vision_layers: int) -> dict:
        """The published config with the shaped layer counts (and remapped layer indices)."""
        cfg = copy.deepcopy(self.config)
        for path in self.text_layers:
            _set(cfg, path, layers)
        for path in self.vision_layers:
            _set(cfg, path, vision_layers)
        if self.remap is not None:
            self.remap(cfg, layers, vision_layers)
        return cfg

    def tensors(self, cfg: dict, vision_layers: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """The checkpoint's tensor names with shapes and dtypes for the shaped config ``cfg``."""
        if self.layout is None:
            return tensor_layout(build_meta(self, cfg))
        dtype = dtype_of(cfg)
        return {name: (tuple(shape), dtype) for name, shape in self.layout(cfg, vision_layers)}

    def fingerprint(self) -> str:
        """A digest of everything the spec writes, for cache keys (a ``layout`` spec adds its 2-layer layout:
        its code is the adapter module's, not data here)."""
        layout = self.layout(self.shaped_config(2, 2), 2) if self.layout is not None else None
        blob = json.dumps([VERSION, self.config, self.files, self.chat_template, self.tokenizer.__dict__, layout,
                           self.shard_bytes], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]


def _set(cfg: dict, path: str, value) -> None:
    keys = path.split(".")
    node = cfg
    for k in keys[:-1]:
        node = node[k]
    if keys[-1] not in node:
        raise KeyError(f"shaped config: {path} is not in the published config")
    node[keys[-1]] = value


def remap_indices(indices: list[int], depth: int, layers: int) -> list[int]:
    """Layer indices of a ``depth``-layer tower mapped into a ``layers``-layer one, keeping their order and
    count where possible: index i → ⌊i · layers / depth⌋, deduplicated; never empty (the last layer)."""
    out = sorted({min(layers - 1, i * layers // depth) for i in indices})
    return out or [layers - 1]


def dtype_of(cfg: dict) -> torch.dtype:
    """The weights' dtype as the published config states it (top level, else the text config)."""
    name = cfg.get("torch_dtype") or cfg.get("dtype")
    for sub in ("text_config", "thinker_config", "llm_config"):
        name = name or (cfg.get(sub) or {}).get("torch_dtype")
    return getattr(torch, name or "bfloat16")


# ----- weights --------------------------------------------------------------------------------------
def _random(name: str, shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random sign and mantissa at exponent 2⁻⁶ (bf16 bits), seeded by the tensor name; norms 1, biases 0."""
    if len(shape) <= 1 and name.endswith(".bias"):
        return torch.zeros(shape, dtype=dtype)
    if len(shape) == 1 and NORM.search(name):
        return torch.ones(shape, dtype=dtype)
    gen = torch.Generator().manual_seed(
        int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:7], "little")
    )
    bits = torch.empty(shape, dtype=torch.int16).random_(-(1 << 15), 1 << 15, generator=gen)
    bits.bitwise_and_(-32641).bitwise_or_(121 << 7)  # keep sign (0x8000) and 7 mantissa bits (0x7F); exponent −6
    t = bits.view(torch.bfloat16)
    return t if dtype == torch.bfloat16 else t.to(dtype)


def tensor_layout(model: torch.nn.Module) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The checkpoint's tensor names (Hub layout) with shapes and dtypes, from a model built on ``meta``."""
    from transformers.core_model_loading import revert_weight_conversion

    state = dict(model.named_parameters())  # tied parameters appear once
    persistent = {n for n, _ in model.named_buffers()} - {
        f"{m}.{b}" if m else b for m, mod in model.named_modules() for b in mod._non_persistent_buffers_set
    }
    if persistent:
        raise NotImplementedError(
            f"{type(model).__name__} has persistent buffers the writer cannot fill: {sorted(persistent)[:4]}"
        )
    reverted = revert_weight_conversion(model, state)
    return {k: (tuple(v.shape), v.dtype) for k, v in reverted.items()}


def write_weights(
    layout: dict[str, tuple[tuple[int, ...], torch.dtype]],
    out: Path,
    seed: int,
    *,
    shard_bytes: int = SHARD_BYTES,
    fixed: dict[str, torch.Tensor] | None = None,
) -> int:
    """Random tensors for ``layout`` (``fixed`` ones as given) in shards of at most ``shard_bytes`` (one tensor
    may exceed it) plus the index; returns the parameter count."""
    fixed = fixed or {}
    for name, t in fixed.items():
        if name not in layout or (tuple(t.shape), t.dtype) != layout[name]:
            raise ValueError(
                f"fixed tensor {name} {tuple(t.shape)} {t.dtype} is not in the layout as {layout.get(name)}"
            )
    shards: list[list[str]] = [[]]
    size = 0
    for name, (shape, dtype) in layout.items():
        nbytes = int(np.prod(shape or (1,))) * torch.empty((), dtype=dtype).element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    total, weight_map = 0, {}
    for i, names in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        tensors = {n: fixed[n] if n in fixed else _random(n, *layout[n], seed) for n in names}
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in names})
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return sum(int(np.prod(s or (1,))) for s, _ in layout.values())


# ----- tokenizer ------------------------------------------------------------------------------------
def write_tokenizer(spec: TokenizerSpec, out: Path, chat_template: str, tokenizers: Path | None) -> str:
    """The tokenizer files in ``out``; returns which tokenizer was used ("real:<base>" or "stand-in")."""
    cfg = dict(spec.config)
    base_dir = tokenizers / spec.base if (tokenizers is not None and spec.base) else None
    if base_dir is not None and (base_dir / "tokenizer.json").is_file():
        tok = json.loads((base_dir / "tokenizer.json").read_text(encoding="utf-8"))
        keep = spec.keep_below if spec.keep_below is not None else 1 << 62
        added = [a for a in tok["added_tokens"] if a["id"] < keep and a["content"] not in spec.specials]
        taken = {a["id"]: a["content"] for a in added}
        for content, i in spec.specials.items():
            if i in taken:
                raise ValueError(f"{content} wants id {i}, held by {taken[i]} in the {spec.base} tokenizer")
            added.append(
                {
                    "id": i,
                    "content": content,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
            )
        tok["added_tokens"] = sorted(added, key=lambda a: a["id"])
        (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
        cfg["chat_template"] = chat_template
        (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False), encoding="utf-8")
        for lic in base_dir.glob("LICENSE*"):  # the real files' licence travels with what is derived from them
            shutil.copy(lic, out / f"tokenizer.{lic.name}")
        used = f"real:{spec.base}"
    else:
        specials = {**spec.base_specials, **spec.specials}
        names = {k: cfg.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        write_standin_tokenizer(
            out,
            spec.vocab_size,
            specials,
            chat_template=chat_template,
            add_bos_token=bool(cfg.get("add_bos_token")),
            **{k: v for k, v in names.items() if isinstance(v, str) and v in specials},
        )
        saved = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
        extra = {
            k: v for k, v in cfg.items() if k not in saved and k not in ("tokenizer_class", "added_tokens_decoder")
        }
        (out / "tokenizer_config.json").write_text(
            json.dumps({**saved, **extra}, indent=2, ensure_ascii=False), encoding="utf-8"
        )
        used = "stand-in"
    (out / "chat_template.jinja").write_text(chat_template, encoding="utf-8")
    return used


# ----- the whole checkpoint -------------------------------------------------------------------------
def build_meta(spec: ShapedSpec, cfg: dict) -> torch.nn.Module:
    """The shaped model on the meta device (no memory), as transformers builds it from ``cfg``."""
    config = tf.AutoConfig.for_model(**copy.deepcopy(cfg))
    for k, v in spec.build_overrides.items():
        setattr(config, k, v)
    with torch.device("meta"):
        return getattr(tf, spec.model_class)._from_config(config, dtype=dtype_of(cfg))


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A hidden sibling directory to write ``out`` into, renamed to ``out`` when the block ends and removed if
    it raises (interrupts included), so a failed writer never leaves a partial checkpoint that looks complete.
    ``out`` must be absent or empty. (A writer killed with SIGKILL leaves the hidden ``.<name>.tmp-<pid>``,
    never ``out``; :func:`kamera.models.shaped.ensure` removes such leftovers under its lock.)"""
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; shaped checkpoints are written into a new directory")
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if out.exists():
            out.rmdir()
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write(
    spec: ShapedSpec,
    out: str | Path,
    *,
    layers: int = 2,
    vision_layers: int = 2,
    seed: int = 0,
    tokenizers: str | Path | None = None,
) -> Path:
    """Write ``spec``'s shaped checkpoint into ``out`` (created; must be empty or absent); returns ``out``.

    Written inside :func:`staged`; ``shaped.json`` (model, layer counts, seed, parameters, tokenizer used,
    writer version, sources) is the last file written, the mark of a complete checkpoint."""
    if layers < 1 or vision_layers < spec.min_vision_layers:
        raise ValueError(
            f"{spec.model}: layers must be >= 1 and vision_layers >= {spec.min_vision_layers}, "
            f"got {layers} and {vision_layers}"
        )
    out = Path(out)
    tokenizers = Path(tokenizers) if tokenizers else None
    with staged(out) as tmp:
        cfg = spec.shaped_config(layers, vision_layers)
        fixed = spec.fixed(cfg) if spec.fixed is not None else None
        n_params = write_weights(spec.tensors(cfg, vision_layers), tmp, seed, shard_bytes=spec.shard_bytes, fixed=fixed)
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
        for name, content in spec.files.items():
            (tmp / name).write_text(json.dumps(content, indent=2), encoding="utf-8")
        used = write_tokenizer(spec.tokenizer, tmp, spec.chat_template, tokenizers)
        manifest = {
            "model": spec.model,
            "layers": layers,
            "vision_layers": vision_layers,
            "seed": seed,
            "parameters": n_params,
            "tokenizer": used,
            "writer_version": VERSION,
            "sources": spec.sources,
            "omitted": spec.omitted,
        }
        (tmp / "shaped.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return out


def writer_for(spec: ShapedSpec) -> Callable[..., Path]:
    """The registry's ``shaped`` hook for ``spec``: ``fn(out, *, layers, vision_layers, seed) -> Path``.

    Real tokenizer files are read from ``$KAMERA_TOKENIZERS`` (a folder with ``qwen2/`` and
    ``llama2/`` subfolders); without it the family's stand-in tokenizer is written."""

    def write_shaped(out: Path, *, layers: int = 2, vision_layers: int = 2, seed: int = 0) -> Path:
        return write(
            spec,
            out,
            layers=layers,
            vision_layers=vision_layers,
            seed=seed,
            tokenizers=os.environ.get("KAMERA_TOKENIZERS") or None,
        )

    write_shaped.__doc__ = f"Write the shaped {spec.model} checkpoint into ``out`` (kamera.models.shaped.writer.write)."
    write_shaped.spec = spec  # type: ignore[attr-defined]
    return write_shaped
