"""Session fixtures for tests on shaped checkpoints (``tests/models`` and ``tests/models_remote`` import them into
their conftest): one cache of shaped checkpoints (:func:`kamera.models.shaped.ensure`) for the whole session, with the
real tokenizer files when they are beside the checkout, and the tier table of which models are canaries.

Checkpoints are written once and kept in :func:`kamera.models.shaped.default_cache` (``$KAMERA_SHAPED``, else one
folder per writer digest under ``~/.cache/kamera/shaped``), so the gate's canary and CI's canaries are built on a
machine's first run only. The real Qwen and Llama-2 tokenizer files are read from ``../shared/tokenizers`` beside the
checkout; without them writers put in their stand-ins (a different cache key).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kamera.models.shaped import default_cache, ensure

SHARED_TOKENIZERS = Path(__file__).resolve().parents[1].parent / "shared" / "tokenizers"

# The shaped canaries: one paper model per family kind, whose load and float32 identities run in CI
# (`make test-ci`); every other paper model's shaped checks, and the bf16, chat, video and remote-code suites,
# run in `make test-full` (the `full` mark). The MHA canary's float32 relocation also runs in `make test`.
CANARIES = {
    "MHA": "smolvlm2",
    "GQA, sectioned M-RoPE": "qwen2_5_vl_7b",
    "GQA, interleaved M-RoPE, deepstack": "qwen3_vl_8b",
    "MLA": "kimi_vl_a3b",
    "hybrid (Gated DeltaNet)": "gdn_hybrid",
}
GATE_CANARY = CANARIES["MHA"]  # the one shaped checkpoint `make test` writes


def shaped_marks(name: str, *, gate: bool = False) -> list:
    """Marks for a test parametrized by shaped model ``name``: its tier (``shaped``, plus ``full`` unless ``name``
    is a canary; none when ``gate`` and ``name`` is the gate's canary) and an xdist group, so one worker runs all
    of one model's tests and loads it once."""
    group = pytest.mark.xdist_group(f"shaped-{name}")
    if gate and name == GATE_CANARY:
        return [group]
    return [group, pytest.mark.shaped] + ([] if name in CANARIES.values() else [pytest.mark.full])


@pytest.fixture(scope="session")
def shaped_cache():
    """Where shaped checkpoints are cached (kept between sessions), with ``$KAMERA_TOKENIZERS`` pointing at the real
    tokenizer files when they are beside the checkout."""
    before = os.environ.get("KAMERA_TOKENIZERS")
    if SHARED_TOKENIZERS.is_dir():
        os.environ["KAMERA_TOKENIZERS"] = str(SHARED_TOKENIZERS)
    root = default_cache()
    root.mkdir(parents=True, exist_ok=True)
    yield str(root)
    if before is None:
        os.environ.pop("KAMERA_TOKENIZERS", None)
    else:
        os.environ["KAMERA_TOKENIZERS"] = before


@pytest.fixture(scope="session")
def shaped_root(shaped_cache):
    """shaped_root(name) → a models root holding the shaped ``name`` (2 layers, 2 vision layers), built once."""
    return lambda name: ensure(name, shaped_cache)
