"""Shaped DeepSeek-VL-7B-chat in its transformers layout (``deepseek-community/deepseek-vl-7b-chat``,
``deepseek_vl_hybrid``): a SigLIP-L tower at 384 px and a SAM-B tower at 1024 px fused into 576 image
tokens, in front of DeepSeek-LLM-7B (Llama MHA, 30 × 4096, vocabulary 102,400).

Numbers, image processor settings, tokenizer specials and the chat format are those of transformers'
conversion script for this checkpoint; the config leaves the rest at the config classes' defaults
(including tied input and output embeddings), as the converted checkpoint does.
"""

from __future__ import annotations

from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, published_files, published_json

PUBLISHED = "deepseek_vl_7b"  # the checkpoint whose published files (configs/deepseek_vl_7b/) this family writes
CONVERTER = (
    "huggingface/transformers src/transformers/models/deepseek_vl_hybrid/convert_deepseek_vl_hybrid_weights_to_hf.py"
)


def _remap(cfg: dict, layers: int, vision_layers: int) -> None:
    """SAM's last block attends globally (as in the 12-block tower); the others keep their 14 × 14 windows."""
    cfg["high_res_vision_config"]["global_attn_indexes"] = [vision_layers - 1]


TEMPLATE = (
    "You are a helpful language and vision assistant. You are able to understand the visual content that the user "
    "provides, and assist the user with a variety of tasks using natural language.\n\n"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}User: {% elif message['role'] == 'assistant' %}Assistant: "
    "{% else %}{{ message['role'].capitalize() }}: {% endif %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image_placeholder>"
    "{% elif part['type'] == 'text' %}{% set text = part['text'] %}"
    "{% if loop.first %}{% set text = text.lstrip() %}{% endif %}"
    "{% if loop.last %}{% set text = text.rstrip() %}{% endif %}"
    "{% if not loop.first and message['content'][loop.index0 - 1]['type'] == 'text' %} {% endif %}{{ text }}"
    "{% endif %}{% endfor %}"
    "{% if not loop.last or add_generation_prompt %}"
    "{% if message['role'] == 'user' %}{{ '\\n\\n' }}{% else %}<｜end▁of▁sentence｜>{% endif %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def deepseek_vl_hybrid(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A DeepSeek-VL (hybrid: SigLIP + SAM) checkpoint in its transformers layout, a stand-in tokenizer."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="DeepseekVLHybridForConditionalGeneration",
        config=config,
        sources=sources,
        text_layers=("text_config.num_hidden_layers",),
        vision_layers=("vision_config.num_hidden_layers", "high_res_vision_config.num_hidden_layers"),
        remap=_remap,
        files=published_files(PUBLISHED),
        chat_template=TEMPLATE,
        tokenizer=TokenizerSpec(
            None,
            config["text_config"]["vocab_size"],
            {"<｜begin▁of▁sentence｜>": 100000, "<｜end▁of▁sentence｜>": 100001, "<image_placeholder>": 100015},
            published_json(PUBLISHED, "tokenizer_config.json"),
        ),
    )
