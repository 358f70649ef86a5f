"""Session fixtures of the shaped-checkpoint tests (helpers live in ``shaped_support.py``)."""

from __future__ import annotations

import os
import shutil

import pytest
from shaped_support import SHARED_TOKENIZERS

from kamera.shaped import ensure


@pytest.fixture(scope="session")
def shaped_cache(tmp_path_factory):
    """Where shaped checkpoints are cached this session (``$KAMERA_SHAPED`` is kept; a session folder is removed),
    with ``$KAMERA_TOKENIZERS`` pointing at the real tokenizer files when they are beside the checkout."""
    before = os.environ.get("KAMERA_TOKENIZERS")
    if SHARED_TOKENIZERS.is_dir():
        os.environ["KAMERA_TOKENIZERS"] = str(SHARED_TOKENIZERS)
    keep = os.environ.get("KAMERA_SHAPED")
    root = keep or str(tmp_path_factory.mktemp("shaped"))
    yield root
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
