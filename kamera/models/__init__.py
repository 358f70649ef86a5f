"""Model adapters (one per family) and the registry of tiny twins, toy models and paper checkpoints (read from
conf/model/*.yaml, each file one model's entry)."""

from kamera.models.base import Adapter, Encoded, EncodedSpan, ForwardOut, additive_mask, place
from kamera.models.entry import ModelEntry
from kamera.models.registry import (
    MODELS,
    CheckpointNotFoundError,
    ModelConfError,
    UnknownModelError,
    checkpoint_path,
    entry,
    load_model,
    model_names,
    model_problems,
)

__all__ = [
    "MODELS",
    "Adapter",
    "CheckpointNotFoundError",
    "Encoded",
    "EncodedSpan",
    "ForwardOut",
    "ModelConfError",
    "ModelEntry",
    "UnknownModelError",
    "additive_mask",
    "checkpoint_path",
    "entry",
    "load_model",
    "model_names",
    "model_problems",
    "place",
]
