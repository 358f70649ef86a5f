#!/usr/bin/env bash
# What the lent GPU runs (docs/gpu.md): install the bundle (device-wheels/, built by scripts/device_wheels.sh and
# carried by the run tool) into a fresh folder with pip --no-index, put that folder and this checkout first on
# PYTHONPATH, and run scripts/gpu_check.py with the arguments given. The rehearsal runs this very file.
#   bash scripts/device_run.sh --paper --out "$OUT"                                    # the lent GPU
#   PYTHON=<venv>/bin/python bash scripts/device_run.sh --paper --tiny --device cpu --out DIR  # make device-rehearsal
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
dir=${KAMERA_BUNDLE:-device-wheels}
if ! compgen -G "$dir/*.whl" >/dev/null; then
  echo "no wheels in $dir/: run 'bash scripts/device_wheels.sh' in the checkout the run is sent from, and carry $dir" >&2
  exit 2
fi
(cd "$dir" && sha256sum --quiet -c SHA256SUMS) || { echo "$dir/ does not match its SHA256SUMS: rebuild it" >&2; exit 2; }
site=$(mktemp -d "${TMPDIR:-/tmp}/kamera-site.XXXXXX")
trap 'rm -rf "$site"' EXIT
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$dir"/*.whl
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$python" scripts/gpu_check.py "$@"
