"""The engine's half of ``make doctor``: vLLM's version and platform, and per page kind the attention backend the
connector selects (:func:`kamera.engine.family.attention_backend`) beside the one vLLM would take unasked on this
CPU (``CpuPlatform.get_attn_backend_cls``), so a machine where the two differ (AMX: AMX_MLA, bf16 only) is seen
before a sweep. Runs in the engine venv; needs no model.

    ~/.cache/kamera/venv-engine/bin/python -m kamera.engine.doctor
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from kamera.engine.family import attention_backend
from kamera.env import report

PAGE_KINDS = {"MLA": SimpleNamespace(kv_lora_rank=512), "GQA": SimpleNamespace()}  # a config of each page kind


def unasked(mla: bool) -> str:
    """The backend vLLM's platform picks for a page kind with no backend requested (its class name)."""
    from vllm.platforms import current_platform
    from vllm.v1.attention.selector import AttentionSelectorConfig

    config = AttentionSelectorConfig(head_size=64, dtype=torch.float32, kv_cache_dtype=None, block_size=None,
                                     use_mla=mla)
    return current_platform.get_attn_backend_cls(None, config).rsplit(".", 1)[-1]


def lines() -> list[str]:
    """One line per page kind: selected and unasked backends."""
    import vllm
    from vllm.platforms import current_platform

    out = [f"vllm             {vllm.__version__} on {type(current_platform).__name__}"]
    for kind, config in PAGE_KINDS.items():
        chosen = attention_backend(config, current_platform.is_cpu())
        out.append(f"attention {kind:<6} kamera selects {chosen or 'the platform default'}; vLLM unasked: "
                   f"{unasked(kind == 'MLA')}")
    return out


def main() -> None:
    print(report())
    print("\n".join(lines()))


if __name__ == "__main__":
    main()
