"""Shaped Kimi-VL-A3B-Instruct (``moonshotai/Kimi-VL-A3B-Instruct``): MoonViT (27 × 1152, patch 14, 2 × 2 merge) and
a DeepSeek-V3-style MoE decoder (27 × 2048, MLA with kv_lora_rank 512 and a 64-dim roped key, 64 routed + 2
shared experts, layer 0 dense), vocabulary 163,840.

The model class is remote code, so the tensors are the adapter module's list of Hub names
(:func:`kamera.models.kimi_vl.hub_tensor_shapes`, the list its loader checks a checkpoint against) for the
shaped config; with 2 layers the decoder keeps one dense and one MoE layer. The stored rotary ``inv_freq``
buffers hold what ``rope_theta`` gives, as the real ones do (the loader compares them). The real tokenizer
is a TikToken one that exists only as the checkpoint's own code: the shaped checkpoint always carries a
stand-in with the 163,840 ids and the 256-id special block at its ids.
"""

from __future__ import annotations

import torch

from kamera.models.kimi_vl import (
    CHAT_TEMPLATE,
    HUB_PREPROCESSOR,
    RESERVED,
    SPECIALS,
    hub_tensor_shapes,
)
from kamera.models.shaped.writer import VLM_LAYERS, ShapedSpec, TokenizerSpec, generation_ids, published_json

PUBLISHED = "kimi_vl_a3b"  # the checkpoint whose tokenizer_config.json (configs/kimi_vl_a3b/) is written


def _inv_freq(cfg: dict) -> dict[str, torch.Tensor]:
    """Each decoder layer's stored rotary ``inv_freq`` [qk_rope_head_dim / 2] = θ^(−2i/d), in bf16."""
    t = cfg["text_config"]
    d = t["qk_rope_head_dim"]
    inv = (1.0 / t["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d)).to(torch.bfloat16)
    return {f"language_model.model.layers.{i}.self_attn.rotary_emb.inv_freq": inv.clone()
            for i in range(t["num_hidden_layers"])}


def kimi_vl(model: str, sources: dict[str, str]) -> ShapedSpec:
    """A Kimi-VL (remote code) checkpoint: the adapter module's tensor layout, stored rotary inv_freq,
    a stand-in tokenizer."""
    config = published_json(model)
    return ShapedSpec(
        model=model,
        model_class="",
        config=config,
        sources=sources,
        **VLM_LAYERS,
        files={
            "preprocessor_config.json": HUB_PREPROCESSOR,
            "generation_config.json": generation_ids(config["text_config"]),
        },
        chat_template=CHAT_TEMPLATE,
        tokenizer=TokenizerSpec(
            None,
            config["vocab_size"],
            {f"<|reserved_token_{i}|>": i for i in RESERVED if i not in set(SPECIALS.values())} | SPECIALS,
            published_json(PUBLISHED, "tokenizer_config.json"),
        ),
        layout=lambda cfg, vision_layers: hub_tensor_shapes(cfg),  # the vision depth is in cfg
        fixed=_inv_freq,
        shard_bytes=1 << 29,  # the published checkpoint is sharded; 512 MiB shards keep the shaped one sharded too
    )
