"""Shaped Gemma-3n-E4B-it (``google/gemma-3n-E4B-it``): its text decoder (35 layers × 2048, 8 heads and 2 KV heads
of 256, per-layer inputs of 256, AltUp × 4, LAuReL rank 64, sliding window 512 on 4 of every 5 layers, the last 15
layers KV-shared, final logits soft-capped at 30), vocabulary 262,400 (per-layer inputs: 262,144).

The published config.json cannot be fetched here; ``configs/gemma3n_e4b.json`` is reconstructed from public
sources (its conf/model file's ``shaped_sources``): its numbers are transformers' ``Gemma3nTextConfig`` /
``Gemma3nAudioConfig`` / ``Gemma3nConfig`` defaults, which their docstrings call the E4B configuration, and its field
names (``rope_theta`` / ``rope_local_base_freq``, ``query_pre_attn_scalar``, ``altup_lr_multiplier``, the vision
config's ``label_names``) are those public readers of the published file parse.

What is written: every tensor ``Gemma3nForConditionalGeneration`` loads, under the checkpoint's names: the decoder
(``model.language_model.*``; the LM head is tied to the embeddings), the vision tower as timm's MobileNetV5 names it
(``model.vision_tower.timm_model.*``: kamera's native encoder, :mod:`kamera.models.mobilenetv5`, registered for the
vision config by :mod:`kamera.models.gemma3n`), the audio tower (``model.audio_tower.*``) and the two multimodal
embedders (``model.embed_vision.*``, ``model.embed_audio.*``); the generation config, the image processor's
preprocessor config, the chat template and a stand-in tokenizer (the published JSON files are data,
``configs/gemma3n_e4b/``).

Shaped layer counts keep the decoder's structure in small (``_remap``): L layers alternate sliding and global
(sliding first), the last ``2·round(⌊L/2⌋ · 15/35)`` are KV-shared (none at 2 layers, 2 of 4), the first
``round(L · 10/35)`` have sparse activations (0.95), as the first 10 of 35 do. ``vision_layers`` V gives the audio
tower V conformer layers and cuts each MobileNetV5 stage to its first block and its last V
(``vision_config.model_args.stage_depths``, :func:`kamera.models.mobilenetv5.cut_stages`: at V = 2 stage 2 keeps its
strided UIR, an MQA block and a UIR; from V = 38 the tower is whole and ``model_args`` stays null).
"""

from __future__ import annotations

from functools import partial

import kamera.models.gemma3n  # noqa: F401  (registers the native MobileNetV5 tower the weights are laid out from)
from kamera.models.mobilenetv5 import ARCHITECTURES
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, published_files, published_json

PUBLISHED = "gemma3n_e4b"  # the checkpoint whose published files (configs/gemma3n_e4b/) this family writes

TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{% set first_user_prefix = (messages[0]['content'] if messages[0]['content'] is string "
    "else messages[0]['content'][0]['text']) + '\n\n' %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<image_soft_token>' }}"
    "{% elif item['type'] == 'audio' %}{{ '<audio_soft_token>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

# the specials Gemma 3 and Gemma-3n share, at their published ids
GEMMA_SPECIALS = {
    "<pad>": 0,
    "<eos>": 1,
    "<bos>": 2,
    "<unk>": 3,
    "<mask>": 4,
    "<start_of_turn>": 105,
    "<end_of_turn>": 106,
    "<start_of_image>": 255999,
}
SPECIALS = {
    **GEMMA_SPECIALS,
    "<start_of_audio>": 256000,
    "<end_of_image>": 262144,
    "<image_soft_token>": 262145,
    "<end_of_audio>": 262272,
    "<audio_soft_token>": 262273,
}


def _remap(full: dict, cfg: dict, layers: int, vision_layers: int) -> None:
    """The per-layer lists and the KV-sharing span for ``layers`` decoder layers (module docstring), from the
    published text config ``full``."""
    text = cfg["text_config"]
    shared = 2 * round((layers // 2) * full["num_kv_shared_layers"] / full["num_hidden_layers"])
    sparse = round(layers * sum(1 for s in full["activation_sparsity_pattern"] if s > 0) / full["num_hidden_layers"])
    text["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    text["num_kv_shared_layers"] = min(shared, max(0, layers - 2))
    text["intermediate_size"] = [full["intermediate_size"][0]] * layers
    text["activation_sparsity_pattern"] = [full["activation_sparsity_pattern"][0]] * sparse + [0.0] * (layers - sparse)
    stages, _ = ARCHITECTURES[cfg["vision_config"]["architecture"]]
    depths = [min(len(stage), 1 + vision_layers) for stage in stages]
    if depths != [len(stage) for stage in stages]:
        cfg["vision_config"]["model_args"] = {"stage_depths": depths}


def gemma3n(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Gemma-3n checkpoint: per-layer lists and KV sharing for the short stack (module docstring),
    a stand-in tokenizer."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="Gemma3nForConditionalGeneration",
        config=config,
        sources=sources,
        text_layers=("text_config.num_hidden_layers",),
        vision_layers=("audio_config.conf_num_hidden_layers",),
        remap=partial(_remap, config["text_config"]),
        files=published_files(PUBLISHED, ("generation_config.json", "preprocessor_config.json")),
        chat_template=TEMPLATE,
        tokenizer=TokenizerSpec(
            None,
            config["text_config"]["vocab_size"],
            SPECIALS,
            published_json(PUBLISHED, "tokenizer_config.json"),
        ),
        omitted="the KV-shared layers' unused K/V projections, if the published file holds them (transformers builds "
        "none for those layers)",
        min_vision_layers=1,
    )
