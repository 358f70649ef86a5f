"""Model adapters (one per family) and the registry of tiny twins, toy models and paper checkpoints (read from
conf/model/*.yaml, each file one model's entry)."""

from kamera.core.precision import DTYPES, dtype_name, parse_dtype
from kamera.models.base import Adapter, Encoded, EncodedSpan, ForwardOut, additive_mask, place
from kamera.models.checkpoints import (
    CheckpointNotFoundError,
    UnsupportedCheckpointError,
    checkpoint_path,
    own_entry,
)
from kamera.models.entry import ModelEntry
from kamera.models.load import load_model
from kamera.models.loading import checkpoint_model_type
from kamera.models.problems import image_problems, model_problems
from kamera.models.registry import MODELS, ModelConfError, UnknownModelError, entry, model_names

__all__ = [
    "DTYPES",
    "MODELS",
    "Adapter",
    "CheckpointNotFoundError",
    "Encoded",
    "EncodedSpan",
    "ForwardOut",
    "ModelConfError",
    "ModelEntry",
    "UnknownModelError",
    "UnsupportedCheckpointError",
    "additive_mask",
    "checkpoint_model_type",
    "checkpoint_path",
    "dtype_name",
    "entry",
    "image_problems",
    "load_model",
    "model_names",
    "model_problems",
    "own_entry",
    "parse_dtype",
    "place",
]
