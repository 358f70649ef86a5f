"""Shaped InternVL3-8B in its transformers layout (``OpenGVLab/InternVL3-8B-hf``): InternViT-300M (24 × 1024, 448-px
tiles, pixel shuffle 0.5 → 256 tokens per tile) in front of Qwen2.5-7B (GQA 28/4 heads, 3584 wide,
dynamic NTK RoPE ×2 beyond 32k, vocabulary 151,674 with InternVL's image tokens from 151665).
"""

from __future__ import annotations

from kamera.models.shaped.tokenizers import QWEN_SPECIALS, qwen_tokenizer_config
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, published_json, writer_for

CONVERTER = "huggingface/transformers src/transformers/models/internvl/convert_internvl_weights_to_hf.py"
SOURCES = {
    "config.json": "huggingface.co/OpenGVLab/InternVL3-8B-hf/blob/main/config.json (language model: the Qwen2.5-7B "
                   f"llm_config of OpenGVLab/InternVL3-8B; image_token_id 151667 and eos 151645 set by {CONVERTER})",
    "preprocessor_config.json": f"{CONVERTER} (write_image_processor: 448 × 448 tiles, ImageNet mean/std); tiles up "
                                "to max_patches 12 plus a thumbnail (GotOcr2 image processor, crop_to_patches set "
                                "by InternVLProcessor)",
    "tokenizer": f"{CONVERTER} (write_tokenizer: the Qwen2.5 tokenizer plus <img> </img> <IMG_CONTEXT> <quad> </quad> "
                 "<ref> </ref> <box> </box> from 151665)",
    "chat_template": "huggingface.co/OpenGVLab/InternVL3-8B-hf/blob/main/chat_template.json (<IMG_CONTEXT> per image, "
                     "no default system turn)",
}

INTERNVL3_8B = published_json("internvl3_8b")  # configs/internvl3_8b.json

TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<IMG_CONTEXT>\n{% elif part['type'] == 'video' %}<video>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

INTERNVL_SPECIALS = {tok: 151665 + i for i, tok in enumerate(
    ["<img>", "</img>", "<IMG_CONTEXT>", "<quad>", "</quad>", "<ref>", "</ref>", "<box>", "</box>"])}

INTERNVL3_8B_SPEC = ShapedSpec(
    model="internvl3_8b",
    model_class="InternVLForConditionalGeneration",
    config=INTERNVL3_8B,
    sources=SOURCES,
    text_layers=("text_config.num_hidden_layers",),
    vision_layers=("vision_config.num_hidden_layers",),
    files={
        "preprocessor_config.json": {
            "image_processor_type": "GotOcr2ImageProcessorFast", "processor_class": "InternVLProcessor",
            "do_resize": True, "size": {"height": 448, "width": 448}, "do_rescale": True, "rescale_factor": 1 / 255,
            "do_normalize": True, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225],
            "do_convert_rgb": True, "crop_to_patches": False, "min_patches": 1, "max_patches": 12,
        },
        "processor_config.json": {"image_seq_length": 256, "processor_class": "InternVLProcessor"},
        "generation_config.json": {"bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643},
    },
    chat_template=TEMPLATE,
    tokenizer=TokenizerSpec(
        "qwen2", 151674, INTERNVL_SPECIALS,
        qwen_tokenizer_config(model_max_length=8192, extra_special_tokens={
            "start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
            "video_token": "<video>"}),
        keep_below=151665, base_specials={k: v for k, v in QWEN_SPECIALS.items() if v < 151665},
    ),
)

internvl3_8b = writer_for(INTERNVL3_8B_SPEC)
