"""Model adapters (one per family) and the registry of tiny twins and paper checkpoints."""

from kamera.models.base import Adapter, Encoded, EncodedSpan, ForwardOut, additive_mask, place
from kamera.models.entry import ModelEntry
from kamera.models.registry import (
    MODELS,
    CheckpointNotFoundError,
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
