"""Shaped InternVL3-8B in its transformers layout (``OpenGVLab/InternVL3-8B-hf``): InternViT-300M (24 × 1024, 448-px
tiles, pixel shuffle 0.5 → 256 tokens per tile) in front of Qwen2.5-7B (GQA 28/4 heads, 3584 wide,
dynamic NTK RoPE ×2 beyond 32k, vocabulary 151,674 with InternVL's image tokens from 151665).
"""

from __future__ import annotations

from kamera.models.shaped.tokenizers import QWEN_SPECIALS, qwen_tokenizer_config
from kamera.models.shaped.writer import VLM_LAYERS, ShapedSpec, TokenizerSpec, published_files, published_json

PUBLISHED = "internvl3_8b"  # the checkpoint whose published files (configs/internvl3_8b/) this family writes
CONVERTER = "huggingface/transformers src/transformers/models/internvl/convert_internvl_weights_to_hf.py"

TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<IMG_CONTEXT>\n{% elif part['type'] == 'video' %}<video>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

INTERNVL_SPECIALS = {tok: 151665 + i for i, tok in enumerate(
    ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>"])}

def internvl(model: str, sources: dict[str, str]) -> ShapedSpec:
    """An InternVL checkpoint in its transformers layout: the Qwen2.5 tokenizer plus InternVL's image tokens."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="InternVLForConditionalGeneration",
        config=config,
        sources=sources,
        **VLM_LAYERS,
        files=published_files(PUBLISHED),
        chat_template=TEMPLATE,
        tokenizer=TokenizerSpec(
            "qwen2", config["text_config"]["vocab_size"], INTERNVL_SPECIALS,
            qwen_tokenizer_config(model_max_length=8192, extra_special_tokens={
                "start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                "video_token": "<video>"}),
            keep_below=151665, base_specials={k: v for k, v in QWEN_SPECIALS.items() if v < 151665},
        ),
    )
