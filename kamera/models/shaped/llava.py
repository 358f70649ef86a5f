"""Shaped LLaVA-1.5-7B (``llava-hf/llava-1.5-7b-hf``): Vicuna-7B (Llama-2 MHA, 32 × 4096) behind CLIP ViT-L/14 at
336 px, 576 image tokens, a two-layer GELU projector.

The text config states only what differs from Llama's defaults (the published file relies on
``LlamaConfig`` defaults for hidden 4096, intermediate 11008, 32 layers and 32 heads), so the shaped
config sets ``num_hidden_layers`` explicitly. Weights are stored in float16, as the published config states.
"""

from __future__ import annotations

from kamera.models.shaped.tokenizers import LLAMA_SPECIALS
from kamera.models.shaped.writer import VLM_LAYERS, ShapedSpec, TokenizerSpec, published_files, published_json

PUBLISHED = "llava_1_5_7b"  # the checkpoint whose published files (configs/llava_1_5_7b/) this family writes


# one user turn: the images first ("<image>\n" each), then the texts each followed by a space
TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% for part in message['content'] | selectattr('type', 'equalto', 'image') %}{{ '<image>\\n' }}{% endfor %}"
    "{% for part in message['content'] | selectattr('type', 'equalto', 'text') %}{{ part['text'] + ' ' }}{% endfor %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)

def llava(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A LLaVA(-1.5) checkpoint: the Llama-2 tokenizer plus <image> and <pad>, at the config's vocabulary size."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="LlavaForConditionalGeneration",
        config=config,
        sources=sources,
        **VLM_LAYERS,
        files=published_files(PUBLISHED),
        chat_template=TEMPLATE,
        tokenizer=TokenizerSpec(
            "llama2",
            config["vocab_size"],
            {"<image>": 32000, "<pad>": 32001},
            published_json(PUBLISHED, "tokenizer_config.json"),
            base_specials=LLAMA_SPECIALS,
        ),
    )
