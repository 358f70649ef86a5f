"""Session fixtures for tests on shaped checkpoints (``tests/models`` and ``tests/models_remote`` import them into
their conftest): one cache of shaped checkpoints (:func:`kamera.models.shaped.ensure`) for the whole session, with the
real tokenizer files when they are beside the checkout.

Checkpoints are cached under ``$KAMERA_SHAPED`` when set (kept, so a developer builds each once), else in
``<pytest basetemp>/shaped`` (one folder per session whichever conftest asks; removed when the session ends).
The real Qwen and Llama-2 tokenizer files are read from ``../shared/tokenizers`` beside the checkout; without
them writers put in their stand-ins.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kamera.models.shaped import ensure

SHARED_TOKENIZERS = Path(__file__).resolve().parents[1].parent / "shared" / "tokenizers"


@pytest.fixture(scope="session")
def shaped_cache(tmp_path_factory):
    """Where shaped checkpoints are cached this session, with ``$KAMERA_TOKENIZERS`` pointing at the real
    tokenizer files when they are beside the checkout."""
    before = os.environ.get("KAMERA_TOKENIZERS")
    if SHARED_TOKENIZERS.is_dir():
        os.environ["KAMERA_TOKENIZERS"] = str(SHARED_TOKENIZERS)
    keep = os.environ.get("KAMERA_SHAPED")
    root = Path(keep) if keep else tmp_path_factory.getbasetemp() / "shaped"
    root.mkdir(parents=True, exist_ok=True)
    yield str(root)
    if before is None:
        os.environ.pop("KAMERA_TOKENIZERS", None)
    else:
        os.environ["KAMERA_TOKENIZERS"] = before
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def shaped_root(shaped_cache):
    """shaped_root(name) → a models root holding the shaped ``name`` (2 layers, 2 vision layers), built once."""
    return lambda name: ensure(name, shaped_cache)
