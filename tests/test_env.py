"""``python -m kamera.env`` / ``make doctor``: the machine facts that change numbers (issue 40), and every run's
provenance carrying them."""

from __future__ import annotations

import subprocess
import sys

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
    facts = {"cpu": "Test CPU 9000", "cpu_flags": ["avx2", "amx_tile"], "amx": True, "cpu_capability": "AVX2",
             "env": {"ATEN_CPU_CAPABILITY": "avx2"}, "threads": 3, "blas": "mkl, oneDNN v3.12.0"}
    text = env.report(facts, {"torch": "2.13.0", "vllm": "not installed"})
    for fact in ("Test CPU 9000", "avx2 amx_tile; AMX yes", "capability AVX2", "ATEN_CPU_CAPABILITY=avx2",
                 "3 intra-op", "mkl, oneDNN", "torch 2.13.0", "vllm not installed"):
        assert fact in text, fact
    assert len(text.splitlines()) <= 24


def test_python_m_kamera_env_prints_it():
    out = subprocess.run([sys.executable, "-m", "kamera.env"], capture_output=True, text=True, check=True).stdout
    assert "torch capability" in out and "blas" in out and "versions" in out
