"""How the tiny random twins are built: transformers config classes (the same code path as the 7B models) with
widths chosen so rank sweeps up to 128 are meaningful: the content channel (K/V width, or the MLA latent) is
≥ 128 wide. Each tiny model's registry entry is its ``conf/model/<name>.yaml``, which names the config function
(``tiny_config``) and the image processor (``image_processor``) here.
"""

from __future__ import annotations

import transformers as tf

VOCAB = 512
IMAGE, VIDEO, VSTART, VEND = VOCAB - 1, VOCAB - 2, VOCAB - 3, VOCAB - 4
SPECIAL_IDS = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VSTART, vision_end_token_id=VEND)

# The shared tiny decoder: 4 layers, hidden 256, 4 heads of 64; GQA with 2 KV heads → width 128.
TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=8192,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
MHA_TEXT = {**TEXT, "num_key_value_heads": 4}  # width 256
MLA_TEXT = dict(
    TEXT,
    num_key_value_heads=4,
    kv_lora_rank=128,
    q_lora_rank=None,
    qk_rope_head_dim=32,
    qk_nope_head_dim=32,
    v_head_dim=64,
    moe_intermediate_size=128,
    n_shared_experts=1,
    n_routed_experts=4,
    num_experts_per_tok=2,
    first_k_dense_replace=1,
)
QWEN_VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=256)


def qwen25_config():
    return tf.Qwen2_5_VLConfig(
        text_config=dict(TEXT, rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[8, 12, 12])),
        vision_config=dict(QWEN_VISION, patch_size=14, window_size=56, fullatt_block_indexes=[1]),
        **SPECIAL_IDS,
    )


def _qwen3_text(**extra):
    rope = dict(rope_type="default", rope_theta=5e6, mrope_section=[12, 10, 10], mrope_interleaved=True)
    return dict(TEXT, head_dim=64, rope_parameters=rope, **extra)


QWEN3_VISION = dict(QWEN_VISION, patch_size=16, num_position_embeddings=256, deepstack_visual_indexes=[0, 1])


def qwen3_config():
    return tf.Qwen3VLConfig(text_config=_qwen3_text(), vision_config=QWEN3_VISION, **SPECIAL_IDS)


def qwen3_moe_config():
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, decoder_sparse_step=1)
    return tf.Qwen3VLMoeConfig(text_config=_qwen3_text(**moe), vision_config=QWEN3_VISION, **SPECIAL_IDS)


def qwen3_omni_config():
    """The Qwen3-Omni thinker's shape: MoE decoder with interleaved M-RoPE, deepstack vision tower, audio tower."""
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, decoder_sparse_step=1)
    return tf.Qwen3OmniMoeThinkerConfig(
        text_config=_qwen3_text(**moe),
        vision_config=dict(QWEN3_VISION, spatial_merge_size=2, temporal_patch_size=2),
        audio_config=dict(d_model=64, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=128, output_dim=256,
                          num_mel_bins=16, downsample_hidden_size=32),
        audio_token_id=VOCAB - 5, audio_start_token_id=VOCAB - 6, audio_end_token_id=VOCAB - 7,
        position_id_per_seconds=13, **SPECIAL_IDS,
    )


def qwen2_5_omni_config():
    """The Qwen2.5-Omni thinker's shape: Qwen2.5-VL's decoder and windowed vision tower plus a Whisper-style audio
    tower (16 mel bins, one layer); audio tokens advance one position per 40 ms (25 per second)."""
    return tf.Qwen2_5OmniThinkerConfig(
        text_config=dict(TEXT, rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[8, 12, 12])),
        vision_config=dict(QWEN_VISION, patch_size=14, window_size=56, fullatt_block_indexes=[1]),
        audio_config=dict(d_model=64, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=128, output_dim=256,
                          num_mel_bins=16),
        audio_token_id=VOCAB - 5, audio_start_token_id=VOCAB - 6, audio_end_token_id=VOCAB - 7,
        position_id_per_seconds=25, **SPECIAL_IDS,
    )


def kimi_config():
    return tf.Kimi_K25Config(
        text_config=dict(MLA_TEXT, model_type="deepseek_v3", n_group=1, topk_group=1),
        vision_config=dict(
            num_hidden_layers=2,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=2,
            pos_emb_height=16,
            pos_emb_width=16,
        ),
        projection_hidden_size=64,
        **SPECIAL_IDS,
    )


def deepseek_v2_config():
    return tf.DeepseekV2Config(**MLA_TEXT)


# The engine twins (vLLM serves them through kamera's KV connector, docs/engine.md): a Qwen2 of the shared tiny widths,
# and the MLA twin with DeepSeek-V2's own latent 512 + k_pe 64, since vLLM's MLA metadata takes a latent row of 320,
# 512 or 576 only (the twin's 128 + 32 = 160 is refused), and n_group = topk_group = 1 (vLLM's DeepSeek-V2 routes
# through grouped top-k and its CPU router asserts both are set; one group is plain greedy top-k, transformers' rule).
ENGINE_ROPE_THETA = 1e6
MLA_ENGINE = {**MLA_TEXT, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "n_group": 1, "topk_group": 1}


def qwen2_config():
    return tf.Qwen2Config(**TEXT, rope_parameters={"rope_type": "default", "rope_theta": ENGINE_ROPE_THETA})


def deepseek_v2_engine_config():
    return tf.DeepseekV2Config(**MLA_ENGINE)


# the ViT tower of the tiny LLaVA and DeepSeek-VL (CLIP, SigLIP): 56² images in 14² patches, 16 image tokens
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=56,
              patch_size=14)


def llava_config():
    return tf.LlavaConfig(
        text_config=dict(model_type="llama", **MHA_TEXT),
        vision_config=dict(
            model_type="clip_vision_model",
            **VISION,
            projection_dim=64,
        ),
        image_token_index=IMAGE,
        image_seq_length=16,
    )


def deepseek_vl_config():
    return tf.DeepseekVLConfig(
        text_config=dict(model_type="llama", **MHA_TEXT),
        vision_config=dict(
            model_type="siglip_vision_model",
            **VISION,
        ),
        image_token_id=IMAGE,
    )


def gemma3n_config():
    """Gemma-3n in small. The text decoder: per-layer inputs, AltUp and LAuReL as in E4B; sliding-window layers (window
    16, shorter than a test item's B) alternating with global ones; the last two layers KV-shared (each reads the last
    earlier layer of its type); the first layer's activations sparse; final logits soft-capped at 30. AltUp's output
    scale is off: transformers initialises it to 0, which in a random model would silence the per-layer inputs.
    The vocabulary is laid out as E4B's: text ids below 448 (the per-layer-input table), then a vision band of 32
    (``<end_of_image>`` at its first id, the image soft token next) and an audio band of 32; ``<start_of_image>`` is the
    text id just below. The vision tower is MobileNetV5's blocks at 8–32 channels (``kamera_mobilenetv5_tiny``): a
    128-px image (:func:`gemma3n_pixels`) gives a 4 × 4 map, 16 soft tokens of 64; a one-layer audio tower."""
    text_vocab, band = VOCAB - 64, 32
    text = dict(
        **dict(TEXT, num_hidden_layers=6),
        head_dim=64,
        vocab_size_per_layer_input=text_vocab,
        hidden_size_per_layer_input=32,
        laurel_rank=16,
        sliding_window=16,
        altup_correct_scale=False,
        layer_types=["sliding_attention", "full_attention"] * 3,
        num_kv_shared_layers=2,
        activation_sparsity_pattern=[0.95] + [0.0] * 5,
        final_logit_softcapping=30.0,
    )
    vision = dict(
        architecture="kamera_mobilenetv5_tiny",
        model_args={"msfa_output_resolution": 4},
        hidden_size=64,
        vocab_offset=text_vocab,
        vocab_size=band,
    )
    audio = dict(
        hidden_size=32,
        conf_num_attention_heads=2,
        conf_num_hidden_layers=1,
        input_feat_size=16,
        sscp_conv_channel_size=[8, 4],
        vocab_offset=text_vocab + band,
        vocab_size=band,
    )
    return tf.Gemma3nConfig(
        text_config=text,
        vision_config=vision,
        audio_config=audio,
        vision_soft_tokens_per_image=16,
        boi_token_id=text_vocab - 1,
        eoi_token_id=text_vocab,
        image_token_id=text_vocab + 1,
        boa_token_id=text_vocab - 2,
        eoa_token_id=text_vocab + band,
        audio_token_id=text_vocab + band + 1,
        eos_token_id=TEXT["eos_token_id"],
        bos_token_id=TEXT["bos_token_id"],
        pad_token_id=TEXT["pad_token_id"],
    )


def gemma3_config():
    """Gemma 3 (text, ``Gemma3ForCausalLM``) in small: 12 layers in Gemma 3's 5 : 1 pattern (sliding window 16, shorter
    than a test item's B; layers 5 and 11 global), two RoPE bases (sliding 10⁴ = ``rope_local_base_freq``, global 10⁶ =
    ``rope_theta``), one KV head of 128 (the content channel 128 wide, as every twin's), 4 query heads, QK-norm,
    ``query_pre_attn_scalar`` 96 (not head_dim, so the scale is the config's), no final logit soft-cap (None, as every
    Gemma 3)."""
    text = {k: v for k, v in TEXT.items() if k not in ("num_key_value_heads", "num_hidden_layers")}
    return tf.Gemma3TextConfig(
        **text,
        num_hidden_layers=12,
        num_key_value_heads=1,
        head_dim=128,
        sliding_window=16,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(12)],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        },
        query_pre_attn_scalar=96,
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
    )


def gemma3n_pixels():
    """Gemma-3n's image processor (SigLIP's, PIL: bilinear resize, rescale to [0, 1], no normalisation) at 128 px."""
    return tf.SiglipImageProcessorPil(size={"height": 128, "width": 128}, resample=2, do_normalize=False)


def _qwen_pixels(patch: int):
    side = patch * 2 * 4  # 4 × 4 merged tokens at most
    return lambda: tf.Qwen2VLImageProcessorPil(
        patch_size=patch, merge_size=2, temporal_patch_size=2, min_pixels=(patch * 2) ** 2, max_pixels=side * side
    )


qwen_pixels_14 = _qwen_pixels(14)  # Qwen2.5-VL's patch
qwen_pixels_16 = _qwen_pixels(16)  # Qwen3-VL's and Qwen3-Omni's


def clip_pixels():
    return tf.CLIPImageProcessorPil(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})


def siglip_pixels():
    return tf.DeepseekVLImageProcessorPil(size={"height": 56, "width": 56})


# Tiny models' fixed chat framing: what a chat template puts around a single-turn prompt (a user-turn header
# before the context, the assistant cue after the question, as Qwen3-VL's template renders them), so a tiny
# item has the shape of a paper-scale one: every item has a prefix, and the canonical KV(B|∅) sits behind it.
TINY_CHAT = ("<|user|>\n", "\n<|assistant|>\n")
