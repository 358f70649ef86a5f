"""Shaped Qwen checkpoints: Qwen2.5-VL-7B-Instruct, Qwen3-VL-8B-Instruct, Qwen3-Omni-30B-A3B-Instruct.

Every number below is the published one (the Hub repo's config.json / preprocessor_config.json /
generation_config.json); ``SOURCES`` names, per model, the published files and the public repository
files that restate them, where the numbers were checked. The chat templates are written here to
render what the published templates render for user turns (text, images, videos; audio for Omni).
"""

from __future__ import annotations

from kamera.models.shaped.tokenizers import QWEN_SPECIALS, qwen_tokenizer_config
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, remap_indices, writer_for

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
}

# ----- Qwen2.5-VL-7B-Instruct ----------------------------------------------------------------------------
QWEN25_VL_7B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 128000,
    "max_window_layers": 28,
    "model_type": "qwen2_5_vl",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "tokens_per_second": 2,
        "temporal_patch_size": 2,
    },
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vocab_size": 152064,
}


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
QWEN3_VL_8B = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "image_token_id": 151655,
    "model_type": "qwen3_vl",
    "text_config": {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "dtype": "bfloat16",
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 12288,
        "max_position_embeddings": 262144,
        "model_type": "qwen3_vl_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": 151936,
    },
    "tie_word_embeddings": False,
    "video_token_id": 151656,
    "vision_config": {
        "deepstack_visual_indexes": [8, 16, 24],
        "depth": 27,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 1152,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": 4304,
        "model_type": "qwen3_vl",
        "num_heads": 16,
        "num_position_embeddings": 2304,
        "out_hidden_size": 4096,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
    "vision_end_token_id": 151653,
    "vision_start_token_id": 151652,
}


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
QWEN3_OMNI_30B_A3B = {
    "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
    "model_type": "qwen3_omni_moe",
    "enable_audio_output": True,
    "im_start_token_id": 151644,
    "im_end_token_id": 151645,
    "assistant_token_id": 77091,
    "system_token_id": 8948,
    "user_token_id": 872,
    "tts_pad_token_id": 151671,
    "tts_bos_token_id": 151672,
    "tts_eos_token_id": 151673,
    "torch_dtype": "bfloat16",
    "thinker_config": {
        "model_type": "qwen3_omni_moe_thinker",
        "audio_start_token_id": 151669,
        "audio_end_token_id": 151670,
        "audio_token_id": 151675,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "position_id_per_seconds": 13,
        "seconds_per_chunk": 2,
        "user_token_id": 872,
        "audio_config": {
            "model_type": "qwen3_omni_moe_audio_encoder",
            "activation_function": "gelu",
            "d_model": 1280,
            "encoder_attention_heads": 20,
            "encoder_ffn_dim": 5120,
            "encoder_layers": 32,
            "downsample_hidden_size": 480,
            "output_dim": 2048,
            "n_window": 50,
            "n_window_infer": 800,
            "conv_chunksize": 500,
            "max_source_positions": 1500,
            "num_mel_bins": 128,
            "scale_embedding": False,
        },
        "vision_config": {
            "model_type": "qwen3_omni_moe_vision_encoder",
            "apply_vit_abs_pos_embed": True,
            "deepstack_visual_indexes": [8, 16, 24],
            "depth": 27,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 1152,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": 4304,
            "num_heads": 16,
            "num_position_embeddings": 2304,
            "out_hidden_size": 2048,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "tokens_per_second": 2,
        },
        "text_config": {
            "model_type": "qwen3_omni_moe_text",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "decoder_sparse_step": 1,
            "head_dim": 128,
            "hidden_act": "silu",
            "hidden_size": 2048,
            "initializer_range": 0.02,
            "intermediate_size": 768,
            "max_position_embeddings": 65536,
            "mlp_only_layers": [],
            "moe_intermediate_size": 768,
            "norm_topk_prob": True,
            "num_attention_heads": 32,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 48,
            "num_key_value_heads": 4,
            "rms_norm_eps": 1e-06,
            "rope_scaling": {"interleaved": True, "mrope_interleaved": True, "mrope_section": [24, 20, 20],
                             "rope_type": "default"},
            "rope_theta": 1000000,
            "router_aux_loss_coef": 0.001,
            "shared_expert_intermediate_size": 0,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "use_cache": True,
            "use_qk_norm": True,
            "use_sliding_window": False,
            "vocab_size": 152064,
        },
    },
    "talker_config": {
        "model_type": "qwen3_omni_moe_talker",
        "accept_hidden_layer": 24, "audio_start_token_id": 151669, "audio_end_token_id": 151670,
        "audio_token_id": 151675, "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
        "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_pad_id": 2148, "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156, "codec_think_eos_id": 2157, "num_code_groups": 16, "thinker_hidden_size": 2048,
        "spatial_merge_size": 2, "position_id_per_seconds": 13, "seconds_per_chunk": 2,
        "speaker_id": {"chelsie": 2301, "ethan": 2302, "aiden": 2303},
        "text_config": {
            "num_hidden_layers": 20, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 2,
            "head_dim": 128, "moe_intermediate_size": 384, "shared_expert_intermediate_size": 768,
            "num_experts": 128, "num_experts_per_tok": 6, "norm_topk_prob": True, "vocab_size": 3072,
            "rope_theta": 1000000, "rope_scaling": {"mrope_section": [24, 20, 20], "interleaved": True},
            "max_position_embeddings": 65536,
        },
        "code_predictor_config": {
            "num_hidden_layers": 5, "hidden_size": 1024, "head_dim": 128, "num_attention_heads": 16,
            "num_key_value_heads": 8, "intermediate_size": 3072, "vocab_size": 2048, "num_code_groups": 16,
            "rope_theta": 1000000, "rms_norm_eps": 1e-06,
        },
    },
    "code2wav_config": {
        "num_quantizers": 16, "num_semantic_quantizers": 1, "codebook_size": 2048, "semantic_codebook_size": 4096,
        "vector_quantization_hidden_dimension": 512, "hidden_size": 1024, "intermediate_size": 3072,
        "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 16, "sliding_window": 72,
        "rope_theta": 10000, "rms_norm_eps": 1e-05, "layer_scale_initial_scale": 0.01, "decoder_dim": 1536,
        "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2], "max_position_embeddings": 8000,
    },
}

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
