"""The family table: which ``model_type`` the harness loads by path and the engine connector serves, in one place.

The engine (:mod:`kamera.engine.family`: its served lists and refusals), the checkpoint loader
(:mod:`kamera.models.checkpoints`: ``model=hf`` text decoders and GGUF files) and the tests that prove each family
(``tests/models/test_own_checkpoint.py``, ``tests/engine``) read this table; none of them types a family list.
A family a registered ``conf/model`` file names loads by path through that entry (``served_families``) without a
row here: a row states what is served *beyond* the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Page = Literal["rope", "mrope", "mla"]


@dataclass(frozen=True)
class Family:
    """What is served of one ``model_type``."""

    engine: Page | None = None  # the connector's page: "rope" (GQA / MHA, 1-D RoPE, "half" pairs), "mrope" (GQA with
    # M-RoPE and image tokens), "mla" (the latent page, k_pe on interleaved pairs); None: the engine refuses it
    text_decoder: bool = False  # model=hf loads it as transformers' causal LM for the type (TextAdapter)
    gguf: bool = False  # a llama.cpp GGUF of it reads into the family's own class (text only)


FAMILIES: dict[str, Family] = {
    "qwen2": Family(engine="rope", text_decoder=True),
    "llama": Family(engine="rope", text_decoder=True),
    "mistral": Family(engine="rope", text_decoder=True),
    "qwen3": Family(engine="rope", text_decoder=True),
    "phi3": Family(text_decoder=True),
    "olmo2": Family(text_decoder=True),
    "qwen2_5_vl": Family(engine="mrope"),
    "qwen3_vl": Family(engine="mrope"),
    "deepseek_v2": Family(engine="mla"),
    "gemma3_text": Family(gguf=True),
}


def engine_served(page: Page) -> tuple[str, ...]:
    """The families the engine connector serves on ``page``, in table order."""
    return tuple(k for k, f in FAMILIES.items() if f.engine == page)


TEXT_DECODER_TYPES = tuple(k for k, f in FAMILIES.items() if f.text_decoder)
GGUF_TYPES = tuple(k for k, f in FAMILIES.items() if f.gguf)
