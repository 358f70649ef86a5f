"""Shaped Qwen3.5-27B (``gdn_hybrid``): the Gated DeltaNet hybrid's configuration and file layout, random weights.

There is no Hub access here, so ``configs/gdn_hybrid.json`` is reconstructed from public restatements of the
checkpoint's config.json, checked against transformers' ``Qwen3_5Config`` / ``Qwen3_5TextConfig`` (its conf/model
file's ``shaped_sources``).
The shortened stack keeps the hybrid: its ``layer_types`` are GDN except the last layer, which is full
attention (2 layers: one of each), so both kinds of layer are exercised.

Tokenizer: Qwen3.5 has a new vocabulary (248,320 embedding rows, specials from 248044), not the Qwen2/Qwen3
BPE the ``qwen2`` tokenizer files hold, so the shaped checkpoint always gets the stand-in tokenizer with the
real vocabulary size and the specials at their published ids (the Qwen special list, in its order, from
``<|endoftext|>`` = 248044: ``<|im_end|>`` 248046, ``<|vision_start|>`` 248053, ``<|image_pad|>`` 248056, ...).
"""

from __future__ import annotations

from kamera.models.shaped.qwen import QWEN3_TEMPLATE
from kamera.models.shaped.tokenizers import QWEN_SPECIALS, qwen_tokenizer_config
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, published_json

QWEN35_SPECIALS = {tok: i - 151643 + 248044 for tok, i in QWEN_SPECIALS.items()}



def _hybrid_layers(cfg: dict, layers: int, vision_layers: int) -> None:
    """The short stack's layer types: Gated DeltaNet, the last layer full attention (every 4th in the full model)."""
    cfg["text_config"]["layer_types"] = ["linear_attention"] * (layers - 1) + ["full_attention"]


def qwen3_5(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Qwen3.5 (Gated DeltaNet hybrid) checkpoint: the short stack's last layer full attention,
    a stand-in tokenizer."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="Qwen3_5ForConditionalGeneration",
        config=config,
        sources=sources,
        text_layers=("text_config.num_hidden_layers",),
        vision_layers=("vision_config.depth",),
        remap=_hybrid_layers,
        files={
            "preprocessor_config.json": published_json("qwen3_vl_8b", "preprocessor_config.json"),  # the same tower
            "generation_config.json": published_json("gdn_hybrid", "generation_config.json"),
        },
        chat_template=QWEN3_TEMPLATE,
        tokenizer=TokenizerSpec(
            None, config["text_config"]["vocab_size"], QWEN35_SPECIALS, qwen_tokenizer_config(model_max_length=262144)
        ),
    )
