"""``python -m kamera.env`` / ``make doctor``: the machine facts that change numbers (issue 40), and every run's
provenance carrying them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from kamera import env
from kamera.job.store import provenance

CPUINFO = "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse2 avx2 fma avx512f amx_tile amx_bf16\n"


def test_the_flags_that_pick_kernels_are_read_from_cpuinfo(monkeypatch):
    monkeypatch.setattr(env, "_cpuinfo", lambda: CPUINFO)
    assert env.cpu_model() == "Test CPU 9000"
    assert env.cpu_flags() == ["avx2", "fma", "avx512f", "amx_tile", "amx_bf16"]  # KERNEL_FLAGS order, sse2 left out
    monkeypatch.setattr(env, "_cpuinfo", lambda: "")
    assert env.cpu_flags() == []


def test_kernel_facts_are_this_process_s(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    facts = env.kernel_facts()
    assert facts["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert facts["threads"] == torch.get_num_threads()
    assert facts["env"]["MKL_CBWR"] == "COMPATIBLE" and "ATEN_CPU_CAPABILITY" not in facts["env"]
    assert facts["blas"] != "unknown"
    assert provenance("cpu", "float32", "eager")["kernels"] == facts


def test_the_report_is_one_screen_with_every_fact(monkeypatch):
    facts = {
        "cpu": "Test CPU 9000",
        "cpu_flags": ["avx2", "amx_tile"],
        "amx": True,
        "cpu_capability": "AVX2",
        "env": {"ATEN_CPU_CAPABILITY": "avx2"},
        "threads": 3,
        "blas": "mkl, oneDNN v3.12.0",
    }
    text = env.report(facts, {"torch": "2.13.0", "vllm": "not installed"})
    for fact in (
        "Test CPU 9000",
        "avx2 amx_tile; AMX yes",
        "capability AVX2",
        "ATEN_CPU_CAPABILITY=avx2",
        "3 intra-op",
        "mkl, oneDNN",
        "torch 2.13.0",
        "vllm not installed",
    ):
        assert fact in text, fact
    assert len(text.splitlines()) <= 24


def test_the_probed_features_are_torchs_probes(monkeypatch):
    """The features the engine's kernel selection reads (kamera.engine.family.platform_kernels): torch's run-time
    probes, the ones vLLM reads, so faking one reaches both."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert "amx_tile" in env.probed_features() and env.amx() and env.kernel_facts()["amx"]
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert "amx_tile" not in env.probed_features() and not env.amx()


def test_python_m_kamera_env_prints_it():
    out = subprocess.run([sys.executable, "-m", "kamera.env"], capture_output=True, text=True, check=True).stdout
    assert "torch capability" in out and "blas" in out and "versions" in out


def test_make_doctor_prints_every_fact_without_the_engine_venv(tmp_path):
    """One screen: CPU model and flags, torch's capability, the forcing env, threads, BLAS, versions; without an
    engine venv it says so in one line (make engine-venv) and exits 0."""
    run = subprocess.run(
        ["make", "-s", "doctor", f"PYTHON={sys.executable}", f"ENGINE_VENV={tmp_path / 'none'}"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"},
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    for fact in (
        env.cpu_model(),
        "kernel flags",
        "torch capability DEFAULT",
        "ATEN_CPU_CAPABILITY=default",
        "MKL_CBWR=COMPATIBLE",
        "intra-op",
        "blas ",
        f"torch {torch.__version__}",
        "transformers ",
        f"engine venv {tmp_path / 'none'}: not built (make engine-venv)",
    ):
        assert fact in out, (fact, out)
    assert len(out.splitlines()) <= 24
