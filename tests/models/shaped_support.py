"""Helpers for the shaped-checkpoint tests: which models they cover, whether the real tokenizer is at hand, and
the standard two-image item.

Checkpoints come from the session cache of ``tests/shaped_fixtures.py``. A model whose writer reads a real
tokenizer that is not beside the checkout is skipped here (its checkpoint would carry a stand-in, and the
chat-template test compares against the real one).
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from shaped_fixtures import SHARED_TOKENIZERS

from kamera.core import ChunkKV
from kamera.items.spans import Clip, Span
from kamera.models import entry
from kamera.models.base import EncodedSpan
from kamera.models.shaped import shaped_models, tokenizer_base

# Models whose float32 copy does not fit this suite's memory: the identities run in bf16 at real dimensions and
# in float32 on the tiny twin built from the same classes and adapter.
BF16_ONLY = {
    "qwen3_omni_30b_a3b": "its 2 × 128 experts alone are 4.8 GB in float32; float32 identities on tiny_qwen3_omni",
}

# Models whose identities run in tests/models_remote (their checkpoints come from the same cache): a Hub layout
# their own loader maps onto native modules, with no transformers processor class to check the chat against,
# and the float32 Kimi-VL alone is 5.6 GB, so that suite keeps one adapter in memory for all its tests.
REMOTE = {
    "kimi_vl_a3b": "tests/models_remote/test_identities.py (fp32 and bf16) and test_checkpoints.py (layout, chat)",
    "phi3_5_vision": "tests/models_remote/test_identities.py (fp32 and bf16) and test_checkpoints.py (layout, chat)",
}


# Models whose shaped identities are in their own test file: the Gated DeltaNet hybrid's recurrent layers have
# no 4D-mask oracle, and its partial RoPE (64 of 256 dims) and state pages need their own checks.
OWN = {
    "gdn_hybrid": "tests/models/test_gdn.py (composition, relocation, full rank = re-prefill, rank 0 = blind)",
    # a remote-code layout (no transformers processor class to check the chat against) with a tiny twin beside it
    "internvl_chat_v1_1": (
        "tests/models/test_internvl_chat.py (weight plan, reference, identities: tiny twin and shaped)"
    ),
}


def native_shaped_models() -> list[str]:
    """Models with a writer whose shaped checkpoints these tests cover (all but ``REMOTE`` and ``OWN``)."""
    return [n for n in shaped_models() if n not in REMOTE and n not in OWN]


def need_real_tokenizer(name: str) -> None:
    """Skip unless the model's tokenizer is a stand-in or its real files are beside the checkout."""
    base = tokenizer_base(name)
    if base and not (SHARED_TOKENIZERS / base / "tokenizer.json").is_file():
        pytest.skip(f"the real {base} tokenizer is not beside this checkout ({SHARED_TOKENIZERS / base})")


def picture(seed: int, size: tuple[int, int] = (112, 112)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))


def item_spans(name: str) -> list[Span]:
    """[prefix, A (image + caption), B (image + caption), query]: an item with two images. SmolVLM2 gets 4:1
    pictures (its processor upsamples every image to a 1536-px long edge and tiles it by 384 px: 5 tiles
    rather than 17), the others squares; a model served text-only gets the item in words."""
    if not entry(name).reads_images:  # a decoder served without its vision tower (Gemma-3n): the item in words
        return [
            Span("prefix", ("Answer with one letter.",)),
            Span("A", ("The key is under the red cup. The coin is under the blue cup.",)),
            Span("B", ("The board shows three cups: the red cup left, the blue cup right, a green cup between.",)),
            Span("query", ("Which side hides the key? A, B, C or D.",)),
        ]
    size = (448, 112) if name == "smolvlm2" else (112, 112)
    return [
        Span("prefix", ("Answer with one letter.",)),
        Span("A", (picture(1, size), "The key is under the red cup.")),
        Span("B", (picture(2, size), "The board shows the cups.")),
        Span("query", ("Which cup hides the key? A, B, C or D.",)),
    ]


def clip(seed: int, n: int = 4, start: float = 4.0, fps: float = 2.0, size: tuple[int, int] = (64, 48)) -> Clip:
    """``n`` frames of one video at ``fps`` from ``start`` seconds."""
    return Clip(tuple(picture(seed + i, size) for i in range(n)), tuple(start + i / fps for i in range(n)))


def video_item() -> list[Span]:
    """[prefix, A (a clip), B (the next clip), query]: a video cut into two chunks of frames."""
    return [
        Span("prefix", ("Watch the video.",)),
        Span("A", (clip(10, start=0.0),)),
        Span("B", (clip(20, start=2.0), "What happens next?")),
        Span("query", ("Answer with one letter.",)),
    ]


def repo(name: str) -> str:
    return entry(name).repo_dir


def rotary(adapter) -> int:
    """Index of the rotating channel (K)."""
    return next(i for i, s in enumerate(adapter.specs) if s.rotary is not None)


def content(adapter) -> int:
    """Index of the content channel (V)."""
    return next(i for i, s in enumerate(adapter.specs) if s.rotary is None)


def prefill_alone(adapter, span: Span | EncodedSpan, start: int) -> ChunkKV:
    """The span prefilled alone from ``start`` (an encoded span is reused: its vision features are not recomputed)."""
    enc = span if isinstance(span, EncodedSpan) else adapter.encode_span(span)
    out = adapter.forward([(enc, start)])
    return adapter.read(out.cache, 0, enc.n_tokens, enc.local_pos + start)
