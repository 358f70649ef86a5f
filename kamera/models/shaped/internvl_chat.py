"""Shaped InternVL-Chat-V1.1 (``OpenGVLab/InternVL-Chat-V1-1``): InternViT-6B (48 × 3200, 448-px tile, read at
``hidden_states[-4]``, pixel shuffle 0.5 → 256 tokens) and the MLP projector in front of a LLaMA-2-13B decoder
(40 × 5120, 40 heads of 128: MHA), vocabulary 32,009.

The model class is remote code, so the tensors are the adapter module's list of Hub names
(:func:`kamera.models.internvl_chat.hub_tensor_shapes`, the list its loader checks a checkpoint against).
``vision_layers`` InternViT layers are written; ``select_layer`` is remapped so the shaped model reads all but the
last (−2: one layer read, one ignored by the loader, as the real model reads 45 of its 48), hence at least 2.

Tokenizer: Llama-2's 32,000 tokens (real files from ``$KAMERA_TOKENIZERS/llama2``, else the stand-in with
``<unk>``, ``<s>``, ``</s>`` at 0-2) plus InternVL's nine added tokens at 32000-32008, in the order the training
code adds them.
"""

from __future__ import annotations

from kamera.models.internvl_chat import (
    ADDED_TOKENS,
    CHAT_TEMPLATE,
    HUB_PREPROCESSOR,
    hub_tensor_shapes,
)
from kamera.models.shaped.tokenizers import LLAMA_SPECIALS
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, generation_ids, published_json

PUBLISHED = "internvl_chat_v1_1"  # the checkpoint whose tokenizer_config.json (configs/internvl_chat_v1_1/) is written
REPO = "github.com/OpenGVLab/InternVL internvl_chat/internvl/"
ADDED = {tok: 32000 + i for i, tok in enumerate(ADDED_TOKENS)}


def _remap(cfg: dict, layers: int, vision_layers: int) -> None:
    """Keep reading a layer before the last: select_layer −k (k − 1 layers unread) → −2 in the short tower."""
    if cfg["select_layer"] != -1:
        cfg["select_layer"] = -2


def internvl_chat(model: str, sources: dict[str, str]) -> ShapedSpec:
    """An InternVL-Chat (remote code) checkpoint: the adapter module's tensor layout,
    select_layer kept before the last."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="",
        config=config,
        sources=sources,
        text_layers=("llm_config.num_hidden_layers",),
        vision_layers=("vision_config.num_hidden_layers",),
        remap=_remap,
        files={
            "preprocessor_config.json": HUB_PREPROCESSOR,
            "generation_config.json": generation_ids(config["llm_config"]),
        },
        chat_template=CHAT_TEMPLATE,
        tokenizer=TokenizerSpec(
            "llama2",
            config["llm_config"]["vocab_size"],
            ADDED,
            published_json(PUBLISHED, "tokenizer_config.json"),
            base_specials=LLAMA_SPECIALS,
        ),
        layout=lambda cfg, vision_layers: hub_tensor_shapes(cfg),  # the vision depth is in cfg
        shard_bytes=1 << 29,
        min_vision_layers=2,  # one layer read and one after it, as select_layer −2 says
    )
