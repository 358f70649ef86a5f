"""Shaped Gemma 3 text checkpoints (``Gemma3ForCausalLM``): 270M (``google/gemma-3-270m``), 1B
(``google/gemma-3-1b-it``) and the 4B's text decoder (the ``text_config`` of ``google/gemma-3-4b-it``).

The published config.json files cannot be fetched here; ``configs/gemma3_{270m,1b,4b}.json`` are reconstructed
(each conf/model file's ``shaped_sources``): the 270M's sizes are those of the real GGUF ``make real`` assembles
(its ``gemma3.*`` metadata: 18 layers × 640, 4 heads and 1 KV head of 256, FFN 2048, window 512, rope_theta 10⁶,
vocabulary 262,144, context 32,768), and the rest is transformers' ``Gemma3TextConfig`` (local base 10⁴,
``query_pre_attn_scalar`` 256, the 5 : 1 pattern, no soft-caps) and public restatements of the published files.

Shaped layer counts keep the 5 : 1 pattern's ends: L layers are sliding except the last, global (at the default 2
layers one of each; at 6 layers exactly the published first six). Tokenizer: a stand-in with the real vocabulary
size and Gemma's specials at their ids (the 262,144-piece SentencePiece model is not shipped). The generation config
is the ids config.json states; tokenizer_config.json is the 1B's (data, ``configs/gemma3_1b/``) with each model's
context length.
"""

from __future__ import annotations

from kamera.models.shaped.gemma3n import GEMMA_SPECIALS, TEMPLATE
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, published_json

PUBLISHED = "gemma3_1b"  # the checkpoint whose tokenizer_config.json (configs/gemma3_1b/) this family writes

SPECIALS = {
    **GEMMA_SPECIALS,
    "<end_of_image>": 256000,
    "<image_soft_token>": 262144,  # 4B's vocabulary (262,208) only
}


def _layer_types(cfg: dict, layers: int, vision_layers: int) -> None:
    """Sliding layers, the last one global (module docstring)."""
    cfg["layer_types"] = ["sliding_attention"] * (layers - 1) + ["full_attention"]


def gemma3(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Gemma 3 text checkpoint: the short stack ends on a global layer; a stand-in tokenizer."""
    config = published_json(model)
    vocab = config["vocab_size"]
    return ShapedSpec(
        model=model,
        model_class="Gemma3ForCausalLM",
        config=config,
        sources=sources,
        text_layers=("num_hidden_layers",),
        vision_layers=(),
        remap=_layer_types,
        files={"generation_config.json": {k: config[k] for k in ("bos_token_id", "pad_token_id", "eos_token_id")}},
        chat_template=TEMPLATE,
        tokenizer=TokenizerSpec(
            None,
            vocab,
            {tok: i for tok, i in SPECIALS.items() if i < vocab},
            published_json(PUBLISHED, "tokenizer_config.json")
            | {"model_max_length": config["max_position_embeddings"]},  # each model's context
        ),
        min_vision_layers=0,
    )
