"""Shaped LLaVA-1.5-7B (``llava-hf/llava-1.5-7b-hf``): Vicuna-7B (Llama-2 MHA, 32 × 4096) behind CLIP ViT-L/14 at
336 px, 576 image tokens, a two-layer GELU projector.

The text config states only what differs from Llama's defaults (the published file relies on
``LlamaConfig`` defaults for hidden 4096, intermediate 11008, 32 layers and 32 heads), so the shaped
config sets ``num_hidden_layers`` explicitly. Weights are stored in float16, as the published config states.
"""

from __future__ import annotations

from kamera.models.shaped.tokenizers import LLAMA_SPECIALS
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, published_json

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


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
        text_layers=("text_config.num_hidden_layers",),
        vision_layers=("vision_config.num_hidden_layers",),
        files={
            "preprocessor_config.json": {
                "crop_size": {"height": 336, "width": 336},
                "do_center_crop": True,
                "do_convert_rgb": True,
                "do_normalize": True,
                "do_rescale": True,
                "do_resize": True,
                "image_mean": CLIP_MEAN,
                "image_std": CLIP_STD,
                "image_processor_type": "CLIPImageProcessor",
                "processor_class": "LlavaProcessor",
                "resample": 3,
                "rescale_factor": 0.00392156862745098,
                "size": {"shortest_edge": 336},
            },
            "processor_config.json": {
                "image_token": "<image>",
                "num_additional_image_tokens": 1,
                "patch_size": 14,
                "processor_class": "LlavaProcessor",
                "vision_feature_select_strategy": "default",
            },
            "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 32001},
        },
        chat_template=TEMPLATE,
        tokenizer=TokenizerSpec(
            "llama2",
            config["vocab_size"],
            {"<image>": 32000, "<pad>": 32001},
            {
                "tokenizer_class": "LlamaTokenizer",
                "add_bos_token": True,
                "add_eos_token": False,
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "unk_token": "<unk>",
                "legacy": True,
                "padding_side": "left",
                "clean_up_tokenization_spaces": False,
                "spaces_between_special_tokens": False,
                "model_max_length": 4096,
            },
            base_specials=LLAMA_SPECIALS,
        ),
    )
