"""Test helpers shared across test folders: the tiny families and a standard [prefix, A, A, B, query] item.

A uniquely named module (not ``conftest``) so every test folder imports the same one.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from kamera.items.spans import Span
from kamera.models import model_names

# tiny_gemma3n is tested on its own (tests/models/test_gemma3n.py): its sliding-window layers are outside the
# partial-forward engine, and its per-layer rotary frequencies and unscaled attention logits (q·k with scaling 1)
# put its float rounding and its rank sweep outside the shared tolerances below
# tiny_gdn_hybrid too (tests/models/test_gdn.py): its Gated DeltaNet layers hold a recurrent state, so the 4D-mask
# oracle and token-subset recompute are not defined for it
# the engine twins (tiny_qwen2: the shared tiny decoder as a plain Qwen2; tiny_deepseek_v2_engine: tiny_deepseek_v2 at
# the latent widths vLLM's MLA takes) run the engine's token-id items, by kamera's own splice too, in
# tests/engine/test_engine_jobs.py: their families' harness paths are tiny_qwen2_5_vl's decoder and tiny_deepseek_v2
ENGINE_TWINS = ("tiny_qwen2", "tiny_deepseek_v2_engine")
TINY = [n for n in model_names("tiny") if n not in ("tiny_gemma3n", "tiny_gdn_hybrid", *ENGINE_TWINS)]


def noise_image(seed: int, size: int = 112) -> Image.Image:
    """A deterministic random RGB image."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8))


def standard_spans(adapter, n_a: int = 2, seed: int = 0, b_text: str = "the ball is by the door") -> list[Span]:
    """[prefix, A_1..A_n, B, query]: images + captions (text only for text-only families)."""

    def chunk(role: str, k: int, text: str) -> Span:
        if not adapter.reads_images:
            return Span(role, (f"{text} number {k} has colour {seed + k}.",))
        return Span(role, (noise_image(seed * 100 + k), f"{text} {k}"))

    a = [chunk("A", k, "object") for k in range(n_a)]
    return [
        Span("prefix", ("You answer with one letter.",)),
        *a,
        chunk("B", 99, b_text),
        Span("query", ("Which colour is at the door? A, B, C or D. Answer:",)),
    ]
