"""Whether a checkpoint's weights are the ones its config.json describes: checked before any weights load and again
as they load.

A config.json that does not belong to its weights loads without complaint in transformers unless told otherwise: a
``qwen2`` config over llama weights initialises the q/k/v biases the file lacks at random and runs (issue 40, the
hostile pass's item a), and ``hidden_size: 999`` over the same weights gets "preflight ok" and then a traceback at
load (item b). Two checks, one line each:

- :func:`weight_problems` (preflight, no weights read): the model class is built from the checkpoint's config on
  the meta device (no memory, no init) and every tensor it expects is compared with the safetensors headers: a
  tensor the model needs that the files lack (one tied to another tensor, such as ``lm_head`` when
  ``tie_word_embeddings``, or one the class declares optional is not needed), a tensor the files hold that the model
  has no place for (unless the class ignores it: a full Omni checkpoint's talker under the thinker), and a tensor of
  another shape, the first few named. Checkpoint keys are renamed as transformers renames them on load
  (``get_model_conversion_mapping``); where one of its converters fuses or splits tensors (MoE experts, fused qkv)
  those tensors' shapes and the keys they make are left to the load-time check. Buffers (RoPE's ``inv_freq``) are not
  weights. A config.json that transformers cannot build (``hidden_size`` not a multiple of the heads) is a line too,
  naming the embedding's shape in the file when that shows the config is not the weights'.
- :func:`loading_problem` (at load): what ``from_pretrained(..., output_loading_info=True)`` reports missing,
  unexpected or of another shape after its own conversions and ignore rules; :func:`kamera.models.loading.load_native`
  raises :class:`CheckpointWeightsError` with it instead of running on initialised weights.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import torch

from kamera.models.entry import ModelEntry

SHOWN = 3  # names listed per kind of problem


class CheckpointWeightsError(ValueError):
    """A checkpoint whose weights are not the ones its config describes (missing, unexpected or misshapen tensors)."""


def _names(keys, shown: int = SHOWN) -> str:
    keys = sorted(keys)
    more = f", … ({len(keys)} in all)" if len(keys) > shown else ""
    return ", ".join(keys[:shown]) + more


def _one_line(err: BaseException) -> str:
    """An exception's message on one line (transformers' config validators wrap the cause over several)."""
    text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _embedding_line(ckpt: Path, tensors: dict[str, list[int]]) -> str | None:
    """Why config.json's (vocab_size, hidden_size) is not the embedding in the file, read off the raw JSON (a text
    decoder's top-level keys), or None."""
    try:
        config = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    shape = tensors.get("model.embed_tokens.weight")
    want = [config.get("vocab_size"), config.get("hidden_size")]
    if shape is None or not all(isinstance(n, int) for n in want) or list(shape) == want:
        return None
    return (
        f"config.json's vocab_size {want[0]} x hidden_size {want[1]} is not the checkpoint's embedding "
        f"model.embed_tokens.weight {list(shape)}"
    )


@functools.lru_cache(maxsize=8)
def _expected(model_class: str, ckpt: str, load_kwargs: tuple, stamp: tuple) -> tuple:
    """(tensor → shape the class builds from the checkpoint's config, tied or optional tensors, ignore patterns for
    unexpected keys, the class's renamings, its converters, its base-model prefix), built on the meta device; cached
    per checkpoint state (``stamp``: config.json's size and mtime)."""
    import transformers as tf
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter

    cls = getattr(tf, model_class)
    config = cls.config_class.from_pretrained(ckpt, **dict(load_kwargs))
    with torch.device("meta"):
        model = cls._from_config(config)
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    params = {k for k, _ in model.named_parameters(remove_duplicate=False)}
    buffers = {k for k in shapes if k not in params}  # not weights (RoPE's inv_freq, position ids): may be absent
    tied = set(getattr(model, "all_tied_weights_keys", {}) or {})
    missing_ok = [*(getattr(model, "_keys_to_ignore_on_load_missing", None) or ())]
    unexpected_ok = [
        *(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or ()),
        r"rotary_emb\.inv_freq",
        r"(^|\.)position_ids$",
    ]
    transforms = get_model_conversion_mapping(model)
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
    return (
        shapes,
        frozenset(tied | buffers),
        tuple(missing_ok),
        tuple(unexpected_ok),
        renamings,
        converters,
        model.base_model_prefix,
    )


def _ignored(key: str, patterns: tuple[str, ...]) -> bool:
    return any(re.search(p, key) for p in patterns)


def weight_problems(e: ModelEntry, ckpt: Path, tensors: dict[str, list[int]]) -> list[str]:
    """Why the safetensors ``tensors`` (name → shape, from the headers) are not the weights ``e``'s class builds from
    ``ckpt``'s config.json, one line each (empty when they are, when the entry loads through a loader of its own,
    or when there are no tensors to compare)."""
    if not tensors or e.loader is not None or not e.model_class:
        return []
    from transformers.core_model_loading import rename_source_key

    where = f"{e.name}: {ckpt}"
    config_json = Path(ckpt) / "config.json"
    stat = config_json.stat()
    try:
        shapes, optional, missing_ok, unexpected_ok, renamings, converters, prefix = _expected(
            e.model_class, str(ckpt), tuple(e.load_kwargs), (stat.st_size, stat.st_mtime_ns)
        )
    except Exception as err:  # a config transformers refuses (its validators raise ValueError and its own kinds)
        embedding = _embedding_line(Path(ckpt), tensors)
        why = embedding or f"transformers cannot build {e.model_class} from it ({_one_line(err)})"
        return [f"{where}/config.json does not describe these weights: {why}; is it the checkpoint's own config?"]
    missing, unexpected, misshapen, converted = set(shapes), set(), [], False
    for key, shape in tensors.items():
        target, pattern = rename_source_key(key, renamings, converters, prefix, shapes)
        if pattern is not None:  # fused or split on load: its shapes and the keys it makes are the load's to check
            converted = True
            missing.discard(target)
            continue
        if target not in shapes:
            if not _ignored(key, unexpected_ok) and not _ignored(target, unexpected_ok):
                unexpected.add(key)
            continue
        missing.discard(target)
        if list(shape) != shapes[target]:
            misshapen.append(f"{key} {list(shape)} vs {shapes[target]}")
    missing = {k for k in missing if k not in optional and not _ignored(k, missing_ok)}
    problems = []
    if misshapen:
        embedding = _embedding_line(Path(ckpt), tensors)
        problems.append(
            f"{where}: {len(misshapen)} tensor(s) in the checkpoint have another shape than its config.json gives "
            f"{e.model_class} (file vs config: {_names(misshapen)})" + (f"; {embedding}" if embedding else "")
        )
    if missing and not converted:
        problems.append(
            f"{where}: {len(missing)} tensor(s) {e.model_class} needs are not in the checkpoint ({_names(missing)}); "
            f"they would be initialised at random: is config.json (model_type, architecture) the weights' own?"
        )
    if unexpected:
        problems.append(
            f"{where}: {len(unexpected)} tensor(s) in the checkpoint have no place in {e.model_class} "
            f"({_names(unexpected)}): is config.json (model_type, architecture) the weights' own?"
        )
    return problems


def loading_problem(info: dict, where: str, model_class: str) -> str | None:
    """One line naming what ``from_pretrained(..., output_loading_info=True)`` reported (``info``: its
    ``missing_keys``, ``unexpected_keys``, ``mismatched_keys``, after transformers' own conversions and ignore rules),
    or None when every weight loaded as it is."""
    missing = set(info.get("missing_keys") or ())
    unexpected = set(info.get("unexpected_keys") or ())
    mismatched = [
        m if isinstance(m, str) else f"{m[0]} {list(m[1])} vs {list(m[2])}" if len(m) == 3 else str(m[0])
        for m in (info.get("mismatched_keys") or ())
    ]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing from the checkpoint, would be initialised at random ({_names(missing)})")
    if unexpected:
        parts.append(f"{len(unexpected)} in the checkpoint with no place in the model ({_names(unexpected)})")
    if mismatched:
        parts.append(f"{len(mismatched)} of another shape (file vs config: {_names(mismatched)})")
    if not parts:
        return None
    return (
        f"{where}: its weights do not load as {model_class} from its config.json: tensors "
        + "; ".join(parts)
        + ": is config.json (model_type, architecture) the weights' own?"
    )
