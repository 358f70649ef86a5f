"""Shaped InternVL-Chat-V1.1 (``OpenGVLab/InternVL-Chat-V1-1``): InternViT-6B (48 × 3200, 448-px tile, read at
``hidden_states[-4]``, pixel shuffle 0.5 → 256 tokens) and the MLP projector in front of a LLaMA-2-13B decoder
(40 × 5120, 40 heads of 128: MHA), vocabulary 32,009.

The model class is remote code, so the tensors are the adapter module's list of Hub names
(:func:`kamera.models.internvl_chat.hub_tensor_shapes`, the list its loader checks a checkpoint against).
``vision_layers`` InternViT layers are written; ``select_layer`` is remapped so the shaped model reads all but the
last (−2: one layer read, one ignored by the loader, as the real model reads 45 of its 48), hence at least 2.

Tokenizer: Llama-2's 32,000 tokens (real files from ``$KAMERA_TOKENIZERS/llama2``, else the stand-in with
``<unk>``, ``<s>``, ``</s>`` at 0-2) plus InternVL's nine added tokens at 32000-32008, in the order the training
code adds them.
"""

from __future__ import annotations

from kamera.models.internvl_chat import (
    ADDED_TOKENS,
    CHAT_TEMPLATE,
    HUB_CONFIG,
    HUB_PREPROCESSOR,
    hub_tensor_shapes,
)
from kamera.models.shaped.tokenizers import LLAMA_SPECIALS
from kamera.models.shaped.writer import ShapedSpec, TokenizerSpec, writer_for

REPO = "github.com/OpenGVLab/InternVL internvl_chat/internvl/"
SOURCES = {
    "config.json": "reconstructed: InternViT-6B-448px numbers from " + REPO + "model/internvl_chat/configuration_intern_vit.py "
                   "(3200 wide, 25 heads, 12800 MLP, 48 layers, RMSNorm, qk-norm, eps 1e-6, no qkv bias, layer scale 0.1); "
                   "select_layer -4, downsample 0.5, 448 px and the LlamaForCausalLM llm_config from the V1.1 release "
                   "(commit 9807c9f, model/internvl_chat/modeling_internvl_chat.py); LLaMA-2-13B's published sizes; "
                   "template internvl_zh from " + REPO + "conversation.py; vocabulary 32,000 + the 9 added tokens "
                   "(the model card's 13.12 B LLM parameters suggest a larger one, see docs/remote_models.md)",
    "tensor names": REPO + "model/internvl_chat/modeling_intern_vit.py, modeling_internvl_chat.py (vision_model, "
                    "mlp1, language_model)",
    "preprocessor_config.json": "the release's CLIPImageProcessor (" + REPO + "serve/model_worker.py at 9807c9f): "
                                "448 px, ImageNet mean/std",
    "tokenizer": "Llama-2 (real files when given) + <img> </img> <IMG_CONTEXT> <quad> </quad> <ref> </ref> <box> </box> "
                 "from 32000 (" + REPO + "train/internvl_chat_finetune.py token_list)",
    "chat_template": REPO + "conversation.py internvl_zh: ' <human>: ' … ' <bot>:'",
}

ADDED = {tok: 32000 + i for i, tok in enumerate(ADDED_TOKENS)}


def _remap(cfg: dict, layers: int, vision_layers: int) -> None:
    """Keep reading a layer before the last: select_layer −k (k − 1 layers unread) → −2 in the short tower."""
    if cfg["select_layer"] != -1:
        cfg["select_layer"] = -2


INTERNVL_CHAT_V1_1_SPEC = ShapedSpec(
    model="internvl_chat_v1_1",
    model_class="",
    config=HUB_CONFIG,
    sources=SOURCES,
    text_layers=("llm_config.num_hidden_layers",),
    vision_layers=("vision_config.num_hidden_layers",),
    remap=_remap,
    files={
        "preprocessor_config.json": HUB_PREPROCESSOR,
        "generation_config.json": {k: HUB_CONFIG["llm_config"][k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
    },
    chat_template=CHAT_TEMPLATE,
    tokenizer=TokenizerSpec(
        "llama2", HUB_CONFIG["llm_config"]["vocab_size"], ADDED,
        {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
         "eos_token": "</s>", "pad_token": "<unk>", "unk_token": "<unk>", "legacy": True,
         "clean_up_tokenization_spaces": False, "model_max_length": 4096},
        base_specials=LLAMA_SPECIALS,
    ),
    layout=lambda cfg, vision_layers: hub_tensor_shapes(cfg),  # the vision depth is in cfg
    shard_bytes=1 << 29,
    min_vision_layers=2,  # one layer read and one after it, as select_layer −2 says
)

internvl_chat_v1_1 = writer_for(INTERNVL_CHAT_V1_1_SPEC)
