"""Why a model cannot run a job, found without loading any weights: one line each, for preflight.

:func:`model_problems` (an unknown name, a path on a built-in model, a missing checkpoint, a checkpoint of another
family, a missing chat template) and :func:`image_problems` (image or video chunks for a model that reads text
only, asked of :attr:`ModelEntry.reads_images <kamera.models.entry.ModelEntry.reads_images>`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from kamera.models.checkpoints import (
    CheckpointNotFoundError,
    UnsupportedCheckpointError,
    checkpoint_path,
    own_entry,
    supported_model_types,
)
from kamera.models.entry import ModelEntry
from kamera.models.loading import CHAT_MODES, checkpoint_model_type, has_chat_template
from kamera.models.registry import UnknownModelError, entry


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
    hint = (
        f"; to run it as your own checkpoint use model=hf model.path={ckpt}" if kind in supported_model_types() else ""
    )
    return (
        f"{e.name}: the checkpoint at {ckpt} has model_type {kind!r}, not {e.family!r} "
        f"(the family {e.name} loads){hint}"
    )


def model_problems(
    name: str, path: str | Path | None = None, models_root: str | Path | None = None, chat: str = "template"
) -> list[str]:
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
            return [
                f"model.path={path}: {name} is a built-in {e.kind} model and loads no checkpoint; to run a "
                f"checkpoint of your own use model=hf model.path={path}"
            ]
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
            problems.append(
                f"{name}: {ckpt} has no chat template (chat_template.jinja, tokenizer_config.json's "
                f"chat_template, or a GGUF's tokenizer.chat_template); model.chat=none runs it without one"
            )
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
    if e.reads_images:
        return []
    for spans in items:
        media = sorted({type(p).__name__ for s in spans() for p in s.parts if not isinstance(p, str)})
        if media:
            break
    else:
        return []
    what = f"{name} ({e.family}, {Path(path).name})" if e.from_checkpoint and path else f"{name} ({e.family})"
    return [
        f"bench={bench} has {' and '.join('video' if m == 'Clip' else 'image' for m in media)} chunks, but model "
        f"{what} is text-only: run it on a text benchmark, or pick a model that reads images"
    ]
