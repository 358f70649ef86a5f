"""Shaped Phi-3.5-vision-instruct (``microsoft/Phi-3.5-vision-instruct``): CLIP ViT-L/14-336 (24 × 1024, read at
its second-to-last layer) with the HD-transform separators and projector, in front of Phi-3 (32 × 3072, 32 heads
of 96: MHA, LongRoPE), vocabulary 32,064.

The model class is remote code, so the tensors are the adapter module's list of Hub names
(:func:`kamera.models.phi3_v.hub_tensor_shapes`, the list its loader checks a checkpoint against). The CLIP
depth is not in config.json (the remote code builds CLIP from constants): the loader reads it from the tensor
names, so ``vision_layers`` CLIP layers are written and the model reads the output of the second-to-last —
at least 2 are needed.

Tokenizer: Llama-2's 32,000 tokens (real files from ``$KAMERA_TOKENIZERS/llama2``, else the stand-in with
``<unk>``, ``<s>``, ``</s>`` at 0-2, as for LLaVA-1.5) plus Phi-3's chat specials at 32000-32010, stand-in names
``<|placeholder7|>`` … for 32011-32043 (never written by the harness) and ``<|image|>`` at 32044.
tokenizer_config.json is Llama-2's with the published config's pad (``<|endoftext|>``, id 32000) and context.
"""

from __future__ import annotations

from kamera.models.phi3_v import (
    CHAT_TEMPLATE,
    HUB_PREPROCESSOR,
    IMAGE_ID,
    IMAGE_TOKEN,
    SPECIALS,
    hub_tensor_shapes,
)
from kamera.models.shaped.tokenizers import LLAMA_SPECIALS
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, generation_ids, published_json

PUBLISHED = "phi3_5_vision"  # the checkpoint whose tokenizer_config.json (configs/phi3_5_vision/) is written
_PLACEHOLDERS = {f"<|placeholder{k}|>": 32011 + k - 7 for k in range(7, 7 + IMAGE_ID - 32011)}

def phi3_v(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Phi-3(.5)-Vision (remote code) checkpoint: the adapter module's tensor layout, the Llama-2 tokenizer."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="",
        config=config,
        sources=sources,
        text_layers=("num_hidden_layers",),
        vision_layers=(),  # CLIP's depth is the tensors' (see the module docstring)
        files={
            "preprocessor_config.json": HUB_PREPROCESSOR,
            "generation_config.json": generation_ids(config),
        },
        chat_template=CHAT_TEMPLATE,
        tokenizer=TokenizerSpec(
            "llama2", config["vocab_size"], SPECIALS | _PLACEHOLDERS | {IMAGE_TOKEN: IMAGE_ID},
            published_json(PUBLISHED, "tokenizer_config.json"),
            base_specials=LLAMA_SPECIALS,
        ),
        layout=lambda cfg, vision_layers: hub_tensor_shapes(cfg, vision_layers),
        shard_bytes=1 << 29,
        min_vision_layers=2,  # the model reads hidden_states[-2]: the output of the second-to-last CLIP layer
    )
