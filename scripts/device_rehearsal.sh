#!/usr/bin/env bash
# make device-rehearsal (docs/gpu.md): the lent GPU's run rehearsed on this CPU, so that run cannot fail on an import
# or a missing file.
# 1. a venv like the device image: Python 3.12 with scripts/device_image.txt (torch 2.11, transformers 5.17 and the
#    image's other packages the script touches; no Hydra), cached in $KAMERA_CACHE (default ~/.cache/kamera) as
#    venv-device-<digest of the interpreter and that file> (cold: a few minutes, torch's CUDA build; warm: nothing);
# 2. the bundle (scripts/device_wheels.sh: kept when up to date, else downloaded);
# 3. exactly what the run tool sends (tracked and untracked-not-ignored files, plus the bundle) copied to a scratch
#    folder, and scripts/device_run.sh run there, with no PYTHONPATH of ours: the device's install line and script,
#    with --paper --tiny --device cpu.
#   bash scripts/device_rehearsal.sh         # REHEARSAL_PYTHON=/path/to/python3.12 to pick the interpreter
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS

python312() {
  local c
  for c in "${REHEARSAL_PYTHON:-}" python3.12 "$(pyenv root 2>/dev/null || true)"/versions/3.12*/bin/python3.12; do
    if [ -n "$c" ] && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      echo "$c"
      return
    fi
  done
  echo "no Python 3.12 here (the device's is 3.12.3): pyenv install 3.12, or set REHEARSAL_PYTHON" >&2
  return 1
}
py=$(python312)
key=$({ "$py" -VV; cat scripts/device_image.txt; } | sha256sum | cut -c1-12)
cache=${KAMERA_CACHE:-$HOME/.cache/kamera}
venv=${KAMERA_DEVICE_VENV:-$cache/venv-device-$key}
mkdir -p "$(dirname "$venv")"
# device-like venvs of other digests (about 5 GB each) unused for 30 days go
find "$cache" -mindepth 1 -maxdepth 1 -name 'venv-device-*' ! -name "venv-device-$key*" -mtime +30 -exec rm -rf {} + 2>/dev/null || true
exec 9>"$venv.lock"
flock 9 # two rehearsals at once: the second waits for the first's venv
if [ ! -f "$venv/.complete" ]; then
  echo "building the device-like venv $venv (Python $("$py" -c 'import platform; print(platform.python_version())'))"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  # (pip's notes on this machine's local package mirrors are dropped; its exit status is kept)
  "$venv/bin/python" -m pip install -q --no-cache-dir -r scripts/device_image.txt 2>&1 | { grep -v '^WARNING: Location' || true; }
  for pkg in hydra omegaconf vllm; do
    if "$venv/bin/python" -c "import $pkg" 2>/dev/null; then
      echo "the device-like venv imports $pkg, which the device image lacks" >&2
      exit 1
    fi
  done
  touch "$venv/.complete"
fi
exec 9>&-
touch "$venv"
echo "device-like venv: $venv ($((SECONDS - t0)) s so far)"

bash scripts/device_wheels.sh

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kamera-rehearsal.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/tree"
git ls-files -z --cached --others --exclude-standard |
  tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$scratch/tree"
cp -r "${KAMERA_BUNDLE:-device-wheels}" "$scratch/tree/"
(cd "$scratch/tree" && env -u PYTHONPATH PYTHON="$venv/bin/python" \
  bash scripts/device_run.sh --paper --tiny --device cpu --out "$scratch/out")
for f in gpu_check.json gpu_check.md gpu_check.log; do
  [ -s "$scratch/out/$f" ] || { echo "the rehearsal wrote no $f" >&2; exit 1; }
done
echo "device rehearsal passed in $((SECONDS - t0)) s (venv $venv)"
