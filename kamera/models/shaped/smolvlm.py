"""Shaped SmolVLM2-2.2B-Instruct (``HuggingFaceTB/SmolVLM2-2.2B-Instruct``): SigLIP-SO400M (27 × 1152, 384-px tiles,
patch 14, pixel shuffle ×3 → 81 tokens per tile) in front of SmolLM2-1.7B (Llama, 24 × 2048, 32 heads
and 32 KV heads: MHA), vocabulary 49,280.

Images are split into up to 4 × 4 tiles of 384 px (longest edge resized to 1536) plus a global view.
"""

from __future__ import annotations

from kamera.models.shaped.writer import VLM_LAYERS, ShapedSpec, TokenizerSpec, published_files, published_json

PUBLISHED = "smolvlm2"  # the checkpoint whose published files (configs/smolvlm2/) this family writes

TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}{{ '<image>' }}{% elif part['type'] == 'video' %}{{ '<video>' }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

SPECIALS = {
    "<|im_start|>": 1, "<|im_end|>": 2, "<|endoftext|>": 0,
    "<global-img>": 49152,
    **{f"<row_{r}_col_{c}>": 49153 + 6 * (r - 1) + (c - 1) for r in range(1, 7) for c in range(1, 7)},
    "<fake_token_around_image>": 49189, "<image>": 49190, "<end_of_utterance>": 49279,
}

def smolvlm(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A SmolVLM checkpoint: a stand-in tokenizer with the published specials at the config's vocabulary size."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="SmolVLMForConditionalGeneration",
        config=config,
        sources=sources,
        **VLM_LAYERS,
        files=published_files(PUBLISHED),
        chat_template=TEMPLATE,
        tokenizer=TokenizerSpec(
            None,
            config["vocab_size"],
            SPECIALS,
            published_json(PUBLISHED, "tokenizer_config.json"),
        ),
    )
