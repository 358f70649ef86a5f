"""The published tokenizer settings shaped checkpoints reuse: Qwen's special tokens and tokenizer_config.json,
Llama-2's (for LLaVA-1.5).

Special-token ids are the published ones: Qwen2/Qwen3's byte-level BPE has 151,643 ordinary tokens and
its specials from 151643 (``<|endoftext|>``) to 151668 (``</think>``); models add theirs after that.
"""

from __future__ import annotations

from kamera.models.shaped.writer import published_json

QWEN_SPECIALS = {
    tok: 151643 + i
    for i, tok in enumerate([
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
        "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
        "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
        "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
        "<think>", "</think>",
    ])
}

LLAMA_SPECIALS = {"<unk>": 0, "<s>": 1, "</s>": 2}


def qwen_tokenizer_config(**extra) -> dict:
    """tokenizer_config.json of the Qwen2.5 / Qwen3 VL checkpoints (Qwen2.5-VL-7B's,
    ``configs/qwen2_5_vl_7b/tokenizer_config.json``): no BOS, ``<|im_end|>`` ends a turn, ``<|endoftext|>`` pads;
    ``extra`` set over it."""
    return {**published_json("qwen2_5_vl_7b", "tokenizer_config.json"), **extra}
