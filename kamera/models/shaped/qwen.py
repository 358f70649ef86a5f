"""Shaped Qwen checkpoints: Qwen2.5-VL-7B-Instruct, Qwen3-VL-8B-Instruct, Qwen3-Omni-30B-A3B-Instruct,
Qwen2.5-Omni-7B.

Every number below is the published one (the Hub repo's config.json / preprocessor_config.json /
generation_config.json); ``SOURCES`` names, per model, the published files and the public repository
files that restate them, where the numbers were checked. The chat templates are written here to
render what the published templates render for user turns (text, images, videos; audio for Omni).
"""

from __future__ import annotations

from kamera.models.shaped.tokenizers import QWEN_SPECIALS, qwen_tokenizer_config
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, published_json, remap_indices, writer_for

QWEN_GENERATION = {"bos_token_id": 151643, "pad_token_id": 151643, "eos_token_id": [151645, 151643]}
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

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

SOURCES = {
    "qwen2_5_vl_7b": {
        "config.json": "huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json; restated field by field "
                       "(text, vision, token ids) in NVIDIA/TensorRT-LLM "
                       "tests/unittest/_torch/modeling/test_modeling_qwen2_5vl.py (QWEN2_5_VL_7B_CONFIG)",
        "preprocessor_config.json": "huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/preprocessor_config.json "
                                    "(min/max pixels 3136 / 12845056, patch 14, merge 2, temporal 2, CLIP mean/std)",
        "chat_template": "huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/chat_template.json (default system turn)",
        "tokenizer": "the Qwen2/Qwen3 byte-level BPE (151,643 merges-vocabulary tokens, specials from 151643)",
    },
    "qwen3_vl_8b": {
        "config.json": "huggingface.co/Qwen/Qwen3-VL-8B-Instruct/blob/main/config.json; restated in NVIDIA/TensorRT-LLM "
                       "tests/unittest/_torch/modeling/test_modeling_qwen3vl.py (QWEN3_VL_8B_CONFIG)",
        "preprocessor_config.json": "huggingface.co/Qwen/Qwen3-VL-8B-Instruct/blob/main/preprocessor_config.json "
                                    "(size 65536..16777216 pixels, patch 16, mean/std 0.5)",
        "video_preprocessor_config.json": "huggingface.co/Qwen/Qwen3-VL-8B-Instruct/blob/main/video_preprocessor_config.json "
                                          "(size 4096..25165824 pixels over all frames, fps 2)",
        "chat_template": "huggingface.co/Qwen/Qwen3-VL-8B-Instruct/blob/main/chat_template.json (no default system turn)",
    },
    "qwen3_omni_30b_a3b": {
        "config.json": "huggingface.co/Qwen/Qwen3-Omni-30B-A3B-Instruct/blob/main/config.json (thinker: 48 MoE layers, "
                       "128 experts, 8 active, moe_intermediate 768; vision 27 x 1152 with deepstack 8/16/24; audio 32 x 1280)",
        "preprocessor_config.json": "huggingface.co/Qwen/Qwen3-Omni-30B-A3B-Instruct/blob/main/preprocessor_config.json",
        "video": "huggingface/transformers src/transformers/models/qwen3_omni_moe/processing_qwen3_omni_moe.py "
                 "(videos_kwargs: 128·32² .. 768·32² pixels per frame, position_id_per_seconds 13)",
        "chat_template": "huggingface.co/Qwen/Qwen3-Omni-30B-A3B-Instruct/blob/main/chat_template.json",
    },
    "qwen2_5_omni_7b": {
        "config.json": "huggingface.co/Qwen/Qwen2.5-Omni-7B/blob/main/config.json, not reachable from here: reconstructed "
                       "from transformers 5.24 models/qwen2_5_omni/configuration_qwen2_5_omni.py (its defaults are this "
                       "checkpoint's: thinker text 28 x 3584, GQA 28/4, M-RoPE 16/24/24, audio 32 x 1280 with 128 mel "
                       "bins, vision 32 blocks with full attention at 7/15/23/31, token ids 151646-151656, 25 positions "
                       "per second), the vision tower's width 1280 as Qwen2.5-VL-7B's (the same tower), and the thinker "
                       "text / audio and talker widths restated in alibaba/rtp-llm rtp_llm/test/omni/"
                       "test_e2e_qwen25_omni_no_mock.py (QWEN25_OMNI_HF_CONFIG: talker 24 x 896, 14/2 heads, vocab 8448)",
        "preprocessor_config.json": "huggingface.co/Qwen/Qwen2.5-Omni-7B/blob/main/preprocessor_config.json: "
                                    "WhisperFeatureExtractor (128 bins, hop 160, n_fft 400, 16 kHz, 300-s window) "
                                    "merged with Qwen2VLImageProcessor (3136..12845056 pixels, patch 14, CLIP mean/std)",
        "video": "transformers 5.24 models/qwen2_5_omni/processing_qwen2_5_omni.py (Qwen2_5OmniProcessor.videos_kwargs: "
                 "128·28² .. 768·28² pixels per frame; audio_kwargs: 16 kHz, return_attention_mask)",
        "chat_template": "huggingface.co/Qwen/Qwen2.5-Omni-7B/blob/main/chat_template.json (default system turn naming "
                         "the model; audio as <|audio_bos|><|AUDIO|><|audio_eos|>, images and video between "
                         "<|vision_bos|> and <|vision_eos|>)",
        "tokenizer": "the Qwen2 byte-level BPE with Omni's specials: ids 151646-151656 renamed (<|AUDIO|>, "
                     "<|audio_bos|>, <|audio_eos|>, <|vision_bos|>, <|vision_eos|>, <|IMAGE|>, <|VIDEO|>) as in "
                     "huggingface.co/Qwen/Qwen2.5-Omni-7B/blob/main/tokenizer_config.json; the ids the thinker config "
                     "states (audio 151646-151648, vision 151652-151656)",
    },
}

# ----- Qwen2.5-VL-7B-Instruct ----------------------------------------------------------------------------
QWEN25_VL_7B = published_json("qwen2_5_vl_7b")  # configs/qwen2_5_vl_7b.json


def _remap_fullatt(cfg: dict, layers: int, vision_layers: int) -> None:
    """Full-attention vision blocks (every 8th of 32) mapped into the shortened tower; the rest stay windowed."""
    cfg["vision_config"]["fullatt_block_indexes"] = remap_indices(
        QWEN25_VL_7B["vision_config"]["fullatt_block_indexes"], QWEN25_VL_7B["vision_config"]["depth"], vision_layers
    )
    cfg["max_window_layers"] = layers


QWEN2_5_VL_7B_SPEC = ShapedSpec(
    model="qwen2_5_vl_7b",
    model_class="Qwen2_5_VLForConditionalGeneration",
    config=QWEN25_VL_7B,
    sources=SOURCES["qwen2_5_vl_7b"],
    text_layers=("num_hidden_layers",),
    vision_layers=("vision_config.depth",),
    remap=_remap_fullatt,
    files={
        "preprocessor_config.json": {
            "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
            "image_mean": CLIP_MEAN, "image_std": CLIP_STD,
            "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
        },
        "generation_config.json": QWEN_GENERATION,
    },
    chat_template=QWEN25_TEMPLATE,
    tokenizer=TokenizerSpec("qwen2", 152064, {}, qwen_tokenizer_config(), base_specials=QWEN_SPECIALS),
)

# ----- Qwen3-VL-8B-Instruct -------------------------------------------------------------------------------
QWEN3_VL_8B = published_json("qwen3_vl_8b")  # configs/qwen3_vl_8b.json


def _remap_deepstack(vision: dict, depth: int, vision_layers: int) -> None:
    """Deepstack taps (vision blocks whose features are added to the first decoder layers) mapped into the
    shortened tower, one tap per block at most."""
    vision["deepstack_visual_indexes"] = remap_indices(vision["deepstack_visual_indexes"], depth, vision_layers)


QWEN3_VL_8B_SPEC = ShapedSpec(
    model="qwen3_vl_8b",
    model_class="Qwen3VLForConditionalGeneration",
    config=QWEN3_VL_8B,
    sources=SOURCES["qwen3_vl_8b"],
    text_layers=("text_config.num_hidden_layers",),
    vision_layers=("vision_config.depth",),
    remap=lambda cfg, layers, v: _remap_deepstack(cfg["vision_config"], QWEN3_VL_8B["vision_config"]["depth"], v),
    files={
        "preprocessor_config.json": {
            "size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16, "temporal_patch_size": 2,
            "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "image_processor_type": "Qwen2VLImageProcessorFast", "processor_class": "Qwen3VLProcessor",
        },
        "video_preprocessor_config.json": {
            "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "patch_size": 16, "temporal_patch_size": 2,
            "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "fps": 2,
            "min_frames": 4, "max_frames": 768, "video_processor_type": "Qwen3VLVideoProcessor",
            "processor_class": "Qwen3VLProcessor",
        },
        "generation_config.json": QWEN_GENERATION,
    },
    chat_template=QWEN3_TEMPLATE,
    tokenizer=TokenizerSpec("qwen2", 151936, {}, qwen_tokenizer_config(), base_specials=QWEN_SPECIALS),
)

# ----- Qwen3-Omni-30B-A3B-Instruct (the thinker is what the harness loads) -----------------------------
OMNI_AUDIO_SPECIALS = {
    "<|audio_start|>": 151669, "<|audio_end|>": 151670, "<tts_pad>": 151671, "<tts_text_bos>": 151672,
    "<tts_text_eod>": 151673, "<tts_text_bos_single>": 151674, "<|audio_pad|>": 151675,
}
QWEN3_OMNI_30B_A3B = published_json("qwen3_omni_30b_a3b")  # configs/qwen3_omni_30b_a3b.json

QWEN3_OMNI_30B_A3B_SPEC = ShapedSpec(
    model="qwen3_omni_30b_a3b",
    model_class="Qwen3OmniMoeForConditionalGeneration",
    config=QWEN3_OMNI_30B_A3B,
    sources=SOURCES["qwen3_omni_30b_a3b"],
    text_layers=("thinker_config.text_config.num_hidden_layers",),
    vision_layers=("thinker_config.vision_config.depth", "thinker_config.audio_config.encoder_layers"),
    remap=lambda cfg, layers, v: _remap_deepstack(
        cfg["thinker_config"]["vision_config"], QWEN3_OMNI_30B_A3B["thinker_config"]["vision_config"]["depth"], v),
    files={
        "preprocessor_config.json": {
            "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
            "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "image_processor_type": "Qwen2VLImageProcessor",
            "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "hop_length": 160,
            "n_fft": 400, "sampling_rate": 16000, "processor_class": "Qwen3OmniMoeProcessor",
        },
        "video_preprocessor_config.json": {
            "size": {"shortest_edge": 128 * 32 * 32, "longest_edge": 768 * 32 * 32}, "patch_size": 16,
            "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "video_processor_type": "Qwen2VLVideoProcessor", "processor_class": "Qwen3OmniMoeProcessor",
        },
        "generation_config.json": QWEN_GENERATION,
    },
    chat_template=QWEN3_TEMPLATE,
    tokenizer=TokenizerSpec("qwen2", 152064, OMNI_AUDIO_SPECIALS, qwen_tokenizer_config(), keep_below=151669,
                            base_specials=QWEN_SPECIALS),
    build_overrides={"enable_audio_output": False},
    omitted="the talker and code2wav (speech output): their configs are the published ones, their tensors are not "
            "written (the harness loads the thinker only, with enable_audio_output=False)",
)


qwen2_5_vl_7b = writer_for(QWEN2_5_VL_7B_SPEC)
qwen3_vl_8b = writer_for(QWEN3_VL_8B_SPEC)
qwen3_omni_30b_a3b = writer_for(QWEN3_OMNI_30B_A3B_SPEC)


# ----- Qwen2.5-Omni-7B (the thinker is what the harness loads) -------------------------------------------
QWEN25_OMNI_7B = published_json("qwen2_5_omni_7b")  # configs/qwen2_5_omni_7b.json
OMNI25_SYSTEM = ("You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of perceiving "
                 "auditory and visual inputs, as well as generating text and speech.")
OMNI25_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\n" + OMNI25_SYSTEM + "<|im_end|>\n{% endif %}"
    + _TURNS.replace("<|vision_start|><|image_pad|><|vision_end|>", "<|vision_bos|><|IMAGE|><|vision_eos|>")
    .replace("<|vision_start|><|video_pad|><|vision_end|>", "<|vision_bos|><|VIDEO|><|vision_eos|>")
    .replace("<|audio_start|><|audio_pad|><|audio_end|>", "<|audio_bos|><|AUDIO|><|audio_eos|>")
    + _GEN
)
# Omni renames Qwen2's specials 151646-151656 (the thinker's audio and vision ids) and keeps the rest to 151664
OMNI25_SPECIALS = {
    tok: 151646 + i
    for i, tok in enumerate([
        "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
        "<|vision_bos|>", "<|vision_eos|>", "<|vision_pad|>", "<|IMAGE|>", "<|VIDEO|>", "<tool_call>", "</tool_call>",
        "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    ])
}


def _remap_omni25(cfg: dict, layers: int, vision_layers: int) -> None:
    """The thinker's full-attention vision blocks mapped into the shortened tower (as Qwen2.5-VL's)."""
    vision = QWEN25_OMNI_7B["thinker_config"]["vision_config"]
    cfg["thinker_config"]["vision_config"]["fullatt_block_indexes"] = remap_indices(
        vision["fullatt_block_indexes"], vision["depth"], vision_layers)
    cfg["thinker_config"]["text_config"]["max_window_layers"] = layers


QWEN2_5_OMNI_7B_SPEC = ShapedSpec(
    model="qwen2_5_omni_7b",
    model_class="Qwen2_5OmniForConditionalGeneration",
    config=QWEN25_OMNI_7B,
    sources=SOURCES["qwen2_5_omni_7b"],
    text_layers=("thinker_config.text_config.num_hidden_layers",),
    vision_layers=("thinker_config.vision_config.depth", "thinker_config.audio_config.encoder_layers"),
    remap=_remap_omni25,
    files={
        "preprocessor_config.json": {
            "chunk_length": 300, "dither": 0.0, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128,
            "hop_length": 160, "n_fft": 400, "n_samples": 4800000, "nb_max_frames": 30000, "padding_side": "right",
            "padding_value": 0.0, "return_attention_mask": True, "sampling_rate": 16000,
            "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
            "image_mean": CLIP_MEAN, "image_std": CLIP_STD, "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2_5OmniProcessor",
        },
        "video_preprocessor_config.json": {
            "size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}, "patch_size": 14,
            "temporal_patch_size": 2, "merge_size": 2, "image_mean": CLIP_MEAN, "image_std": CLIP_STD,
            "video_processor_type": "Qwen2VLVideoProcessor", "processor_class": "Qwen2_5OmniProcessor",
        },
        "generation_config.json": QWEN_GENERATION,
    },
    chat_template=OMNI25_TEMPLATE,
    tokenizer=TokenizerSpec("qwen2", 152064, OMNI25_SPECIALS, qwen_tokenizer_config(), keep_below=151646,
                            base_specials={k: v for k, v in QWEN_SPECIALS.items() if v < 151646}),
    build_overrides={"enable_audio_output": False},
    omitted="the talker and token2wav (speech output): their configs are the published ones, their tensors (and "
            "spk_dict.pt) are not written (the harness loads the thinker class, which reads the thinker's tensors)",
)

qwen2_5_omni_7b = writer_for(QWEN2_5_OMNI_7B_SPEC)
