"""Shaped Qwen checkpoints: Qwen2.5-VL-7B-Instruct, Qwen3-VL-8B-Instruct, Qwen3-Omni-30B-A3B-Instruct,
Qwen2.5-Omni-7B.

One spec builder per family, ``fn(model, sources) -> ShapedSpec``, named by each model's ``conf/model`` file
(``entry.shaped``): the config is the model's published ``config.json`` (``configs/<model>.json``) and the
sources its file's ``entry.shaped_sources`` (the published files and the public repository files that restate
them, where the numbers were checked), so a model of one of these families is its YAML and its config. The other
published files (preprocessor, video preprocessor, generation and tokenizer configs) are data too,
``configs/<checkpoint>/<file>`` (:func:`~kamera.models.shaped.writer.published_json`), of the checkpoint each family
is written from; the chat templates are written here to render what the published templates render for user turns
(text, images, videos; audio for Omni).
"""

from __future__ import annotations

from kamera.models.shaped.tokenizers import QWEN_SPECIALS, qwen_tokenizer_config
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, published_json, remap_indices

# the generation config every Qwen VL and Omni spec here writes: Qwen2.5-VL-7B's token ids
QWEN_GENERATION = published_json("qwen2_5_vl_7b", "generation_config.json")

# ----- chat templates (user turns: text, image, video, audio; system only when given, except Qwen2.5-VL) --
_PARTS = (
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'audio' %}<|audio_start|><|audio_pad|><|audio_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
)
_TURNS = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n" + _PARTS + "<|im_end|>\n{% endfor %}"
_GEN = "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
# Qwen2.5-VL adds a default system turn when the conversation does not start with one
QWEN25_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    + _TURNS + _GEN
)
QWEN3_TEMPLATE = _TURNS + _GEN


def _files(checkpoint: str, *files: str) -> dict[str, dict]:
    """The published ``files`` of ``checkpoint`` (``configs/<checkpoint>/<file>``) and the Qwen generation config."""
    return {f: published_json(checkpoint, f) for f in files} | {"generation_config.json": QWEN_GENERATION}


# ----- Qwen2.5-VL (Qwen2.5-VL-7B-Instruct) -----------------------------------------------------------------
def qwen2_5_vl(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Qwen2.5-VL checkpoint: full-attention vision blocks (every 8th of 32) mapped into the shortened tower, the
    rest windowed; the Qwen2 tokenizer at the config's vocabulary size."""
    config = published_json(model)
    vision = config["vision_config"]

    def remap(cfg: dict, layers: int, vision_layers: int) -> None:
        cfg["vision_config"]["fullatt_block_indexes"] = remap_indices(vision["fullatt_block_indexes"], vision["depth"],
                                                                      vision_layers)
        cfg["max_window_layers"] = layers

    return ShapedSpec(
        model=model,
        model_class="Qwen2_5_VLForConditionalGeneration",
        config=config,
        sources=sources,
        text_layers=("num_hidden_layers",),
        vision_layers=("vision_config.depth",),
        remap=remap,
        files=_files("qwen2_5_vl_7b", "preprocessor_config.json"),
        chat_template=QWEN25_TEMPLATE,
        tokenizer=TokenizerSpec(
            "qwen2", config["vocab_size"], {}, qwen_tokenizer_config(), base_specials=QWEN_SPECIALS
        ),
    )


# ----- Qwen3-VL (Qwen3-VL-8B-Instruct) --------------------------------------------------------------------
def _remap_deepstack(vision: dict, depth: int, vision_layers: int) -> None:
    """Deepstack taps (vision blocks whose features are added to the first decoder layers) mapped into the
    shortened tower, one tap per block at most."""
    vision["deepstack_visual_indexes"] = remap_indices(vision["deepstack_visual_indexes"], depth, vision_layers)


def qwen3_vl(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Qwen3-VL checkpoint: deepstack taps mapped into the shortened tower; the Qwen2 tokenizer."""
    config = published_json(model)
    depth = config["vision_config"]["depth"]
    return ShapedSpec(
        model=model,
        model_class="Qwen3VLForConditionalGeneration",
        config=config,
        sources=sources,
        text_layers=("text_config.num_hidden_layers",),
        vision_layers=("vision_config.depth",),
        remap=lambda cfg, layers, v: _remap_deepstack(cfg["vision_config"], depth, v),
        files=_files("qwen3_vl_8b", "preprocessor_config.json", "video_preprocessor_config.json"),
        chat_template=QWEN3_TEMPLATE,
        tokenizer=TokenizerSpec(
            "qwen2", config["text_config"]["vocab_size"], {}, qwen_tokenizer_config(), base_specials=QWEN_SPECIALS
        ),
    )


# ----- Qwen3-Omni (Qwen3-Omni-30B-A3B-Instruct; the thinker is what the harness loads) -------------------
OMNI_AUDIO_SPECIALS = {
    "<|audio_start|>": 151669,
    "<|audio_end|>": 151670,
    "<tts_pad>": 151671,
    "<tts_text_bos>": 151672,
    "<tts_text_eod>": 151673,
    "<tts_text_bos_single>": 151674,
    "<|audio_pad|>": 151675,
}


def qwen3_omni_moe(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Qwen3-Omni checkpoint: the thinker's deepstack taps mapped into the shortened tower, the audio tower
    shortened with it; talker and code2wav configs kept, their tensors not written."""
    config = published_json(model)
    depth = config["thinker_config"]["vision_config"]["depth"]
    return ShapedSpec(
        model=model,
        model_class="Qwen3OmniMoeForConditionalGeneration",
        config=config,
        sources=sources,
        text_layers=("thinker_config.text_config.num_hidden_layers",),
        vision_layers=("thinker_config.vision_config.depth", "thinker_config.audio_config.encoder_layers"),
        remap=lambda cfg, layers, v: _remap_deepstack(cfg["thinker_config"]["vision_config"], depth, v),
        files=_files("qwen3_omni_30b_a3b", "preprocessor_config.json", "video_preprocessor_config.json"),
        chat_template=QWEN3_TEMPLATE,
        tokenizer=TokenizerSpec(
            "qwen2",
            config["thinker_config"]["text_config"]["vocab_size"],
            OMNI_AUDIO_SPECIALS,
            qwen_tokenizer_config(),
            keep_below=151669,
            base_specials=QWEN_SPECIALS,
        ),
        build_overrides={"enable_audio_output": False},
        omitted="the talker and code2wav (speech output): their configs are the published ones, their tensors are not "
        "written (the harness loads the thinker only, with enable_audio_output=False)",
    )


# ----- Qwen2.5-Omni (Qwen2.5-Omni-7B; the thinker is what the harness loads) -------------------------------
OMNI25_SYSTEM = (
    "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of perceiving "
    "auditory and visual inputs, as well as generating text and speech."
)
OMNI25_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\n"
    + OMNI25_SYSTEM
    + "<|im_end|>\n{% endif %}"
    + _TURNS.replace("<|vision_start|><|image_pad|><|vision_end|>", "<|vision_bos|><|IMAGE|><|vision_eos|>")
    .replace("<|vision_start|><|video_pad|><|vision_end|>", "<|vision_bos|><|VIDEO|><|vision_eos|>")
    .replace("<|audio_start|><|audio_pad|><|audio_end|>", "<|audio_bos|><|AUDIO|><|audio_eos|>")
    + _GEN
)
# Omni renames Qwen2's specials 151646-151656 (the thinker's audio and vision ids) and keeps the rest to 151664
OMNI25_SPECIALS = {
    tok: 151646 + i
    for i, tok in enumerate(
        [
            "<|AUDIO|>",
            "<|audio_bos|>",
            "<|audio_eos|>",
            "<|box_end|>",
            "<|quad_start|>",
            "<|quad_end|>",
            "<|vision_bos|>",
            "<|vision_eos|>",
            "<|vision_pad|>",
            "<|IMAGE|>",
            "<|VIDEO|>",
            "<tool_call>",
            "</tool_call>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
        ]
    )
}


def qwen2_5_omni(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Qwen2.5-Omni checkpoint: the thinker's full-attention vision blocks mapped into the shortened tower (as
    Qwen2.5-VL's), the audio tower shortened with it; talker and token2wav configs kept, their tensors not written."""
    config = published_json(model)
    vision = config["thinker_config"]["vision_config"]

    def remap(cfg: dict, layers: int, vision_layers: int) -> None:
        cfg["thinker_config"]["vision_config"]["fullatt_block_indexes"] = remap_indices(
            vision["fullatt_block_indexes"], vision["depth"], vision_layers
        )
        cfg["thinker_config"]["text_config"]["max_window_layers"] = layers

    return ShapedSpec(
        model=model,
        model_class="Qwen2_5OmniForConditionalGeneration",
        config=config,
        sources=sources,
        text_layers=("thinker_config.text_config.num_hidden_layers",),
        vision_layers=("thinker_config.vision_config.depth", "thinker_config.audio_config.encoder_layers"),
        remap=remap,
        files=_files("qwen2_5_omni_7b", "preprocessor_config.json", "video_preprocessor_config.json"),
        chat_template=OMNI25_TEMPLATE,
        tokenizer=TokenizerSpec(
            "qwen2",
            config["thinker_config"]["text_config"]["vocab_size"],
            OMNI25_SPECIALS,
            qwen_tokenizer_config(),
            keep_below=151646,
            base_specials={k: v for k, v in QWEN_SPECIALS.items() if v < 151646},
        ),
        build_overrides={"enable_audio_output": False},
        omitted="the talker and token2wav (speech output): their configs are the published ones, their tensors (and "
        "spk_dict.pt) are not written (the harness loads the thinker class, which reads the thinker's tensors)",
    )
