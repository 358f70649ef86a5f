"""The engine's half of ``make doctor``: vLLM's version and platform, and per page kind and dtype the attention
kernels the connector selects (:func:`kamera.engine.family.select_kernels`: backend / ISA / kernel library) beside
the backend vLLM would take unasked on this CPU (``CpuPlatform.get_attn_backend_cls``), so a machine where the two
differ (AMX: AMX_MLA, bf16 only) is seen before a sweep. Runs in the engine venv; needs no model.

    ~/.cache/kamera/venv-engine/bin/python -m kamera.engine.doctor
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from kamera.engine.family import (
    DTYPES,
    GQA_SERVED,
    MLA_SERVED,
    MROPE_SERVED,
    EngineError,
    head_size,
    platform_kernels,
)
from kamera.env import report

# a config of each page kind (the tiny twins' head sizes: MLA latent 512 + k_pe 64, GQA head 64)
PAGE_KINDS = {
    "MLA": (SimpleNamespace(kv_lora_rank=512, qk_rope_head_dim=64), MLA_SERVED),
    "GQA": (SimpleNamespace(head_dim=64), GQA_SERVED + MROPE_SERVED),
}


def unasked(config: SimpleNamespace, dtype: str) -> str:
    """The backend vLLM's platform picks for a page kind with no backend requested (its class name)."""
    from vllm.platforms import current_platform
    from vllm.v1.attention.selector import AttentionSelectorConfig

    selector = AttentionSelectorConfig(
        head_size=head_size(config),
        dtype=getattr(torch, dtype),
        kv_cache_dtype=None,
        block_size=None,
        use_mla=hasattr(config, "kv_lora_rank"),
    )
    return current_platform.get_attn_backend_cls(None, selector).rsplit(".", 1)[-1]


def lines() -> list[str]:
    """vLLM's version, then one line per page kind x dtype: the selected kernels and vLLM's unasked backend."""
    import vllm
    from vllm.platforms import current_platform

    out = [f"vllm             {vllm.__version__} on {type(current_platform).__name__}"]
    for kind, (config, families) in PAGE_KINDS.items():
        for dtype in DTYPES:
            try:
                chosen = platform_kernels(config, dtype).tag
            except EngineError as err:
                chosen = f"refused: {err}"
            out.append(f"attention {kind} {dtype:<8} kamera selects {chosen}; vLLM unasked: {unasked(config, dtype)}")
        out.append(f"  ({kind}: {', '.join(families)})")
    return out


def main() -> None:
    machine = ("cpu ", "kernel flags")  # the machine's lines: make doctor printed them from the main env just above
    print("\n".join(line for line in report().splitlines() if not line.startswith(machine)))
    print("\n".join(lines()))


if __name__ == "__main__":
    main()
