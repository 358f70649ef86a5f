#!/usr/bin/env bash
# A side venv with stock SGLang 0.5.23 on a CPU, for kamera's position-free radix cache (kamera/engine/sglang_radix.py):
#   scripts/sglang_venv.sh [VENV]        default: ~/.cache/kamera/venv-sglang (make sglang-venv; ~3 min, 2.7 GB)
# Why a side venv: `pip install sglang==0.5.23` resolves a CUDA stack (torch 2.14.1+cu130, sglang-kernel, flashinfer,
# ~30 nvidia-* packages, 11 GB) whose `import sgl_kernel` fails without libcuda.so.1, and PyPI has no CPU build of
# sgl-kernel. Its server runs here all the same on CPU torch 2.13.0 (never a CUDA torch: pinned by a constraints file
# for every step) with the sglang wheel installed --no-deps, the pure-Python packages its server's imports reach (found
# one ImportError at a time), and two stand-ins for what has no CPU build, scripts/sglang_cpu/ (its README.md):
# torchvision (module-level imports only) and vllm._custom_ops.rotary_embedding (in plain torch). Then kamera from this
# checkout (pip install --no-deps -e), whose entry point (group sglang.srt.plugins) registers --radix-cache-backend
# kamera. On a GPU node none of this is needed: `pip install sglang==0.5.23` and kamera beside it.
# Idempotent: a rerun installs nothing new.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$HOME/.cache/kamera/venv-sglang}"
wheels="${SGLANG_WHEELS:-$HOME/.cache/kamera/wheels-sglang}"
SGLANG=0.5.23
TORCH=2.13.0
# SGLang's own pins where it pins one (openai, tokenizers, transformers, xgrammar), else what resolves beside torch
deps=(aiohttp blobfile compressed-tensors dill distro easydict einops fastapi gguf huggingface_hub interegular ipython
      jsonschema llguidance msgspec numpy openai==2.8.0 orjson packaging partial_json_parser pillow prometheus-client
      psutil pybase64 pydantic python-dateutil python-multipart pyzmq regex requests safetensors scipy sentencepiece
      setproctitle soundfile tiktoken tokenizers==0.23.2 tqdm transformers==5.19.0 uvicorn uvloop xgrammar==0.2.7
      xxhash zstandard)

. "$repo/scripts/side_venv.sh"
side_venv "$venv" "$TORCH" sglang_venv.sh
side_wheel "$wheels" sglang "$SGLANG"
# pip then lists the wheel's unmet requirements as "dependency conflicts" (torch==2.14.1, sglang-kernel, flashinfer,
# the CUDA kernels): expected, the check below starts what is needed
"${pip[@]}" -c "$pins" "${deps[@]}"
"${pip[@]}" --no-deps -e "$repo"
site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$repo/scripts/sglang_cpu" >"$site/kamera_sglang_cpu.pth"

"$py" - <<'PY'
import sglang.launch_server  # noqa: F401
from sglang.srt.mem_cache.registry import registered_radix_cache_backends
from sglang.srt.plugins import load_plugins

load_plugins()
assert "kamera" in registered_radix_cache_backends(), registered_radix_cache_backends()
print("import check: sglang.launch_server, --radix-cache-backend kamera registered: ok")
PY
echo "sglang_venv.sh: built $venv: $("$py" -c 'import importlib.metadata as m; print(*(f"{p} {m.version(p)}" for p in ("sglang", "torch", "transformers", "kamera")), sep=", ")')"
echo "  check it: SGLANG_PYTHON=$py python -m kamera.engine.verify --engine sglang --family qwen2"
