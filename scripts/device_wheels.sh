#!/usr/bin/env bash
# The device bundle (docs/gpu.md): the wheels `scripts/gpu_check.py --paper` needs on the lent GPU that its image
# lacks or has too old, for CPython 3.12 on manylinux x86_64, in device-wheels/ (git-ignored: the run tool carries it,
# and scripts/device_run.sh installs it there with pip --no-index). Today that is one wheel: transformers at kamera's
# floor in pyproject.toml (the image has 5.17). kamera itself travels as the source tree (its registry reads conf/), and
# nothing the script imports needs Hydra or omegaconf, which the image lacks. Idempotent: a bundle that names the
# current floor and matches its SHA256SUMS is kept without a download.
#   bash scripts/device_wheels.sh      # in the checkout the device run is sent from; prints sizes, fails over a limit
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KAMERA_BUNDLE:-device-wheels}
bundle_limit_mib=32 # the issue's bound for the bundle; the run tool's is 64 MiB for everything that travels
travel_limit_mib=64

floor=$(python3 - <<'PY'
import re
import tomllib

deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
spec = next(d for d in deps if re.match(r"transformers\b", d))
print(re.search(r">=\s*([0-9][0-9.]*)", spec).group(1))
PY
)
want="transformers==$floor"

if [ -f "$dir/BUNDLE" ] && [ "$(cat "$dir/BUNDLE")" = "$want" ] && (cd "$dir" && sha256sum --quiet -c SHA256SUMS); then
  echo "bundle up to date: $dir ($want)"
else
  tmp=$(mktemp -d "${dir%/}.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  platforms=()
  for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
  done
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$tmp" "$want"
  (cd "$tmp" && sha256sum -- *.whl >SHA256SUMS)
  echo "$want" >"$tmp/BUNDLE"
  chmod 755 "$tmp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
  echo "bundle built: $dir ($want)"
fi

bytes() { xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
bundle=$(find "$dir" -type f -print0 | bytes)
tree=$(git ls-files -z --cached --others --exclude-standard | bytes)
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "bundle: $(mib "$bundle") ($(cd "$dir" && ls -- *.whl | tr '\n' ' '))"
echo "travels with a run: working tree $(mib "$tree") + bundle $(mib "$bundle") = $(mib $((tree + bundle))) of $travel_limit_mib MiB"
if [ "$bundle" -gt $((bundle_limit_mib << 20)) ] || [ $((tree + bundle)) -gt $((travel_limit_mib << 20)) ]; then
  echo "over the limit: the bundle may hold $bundle_limit_mib MiB, all that travels $travel_limit_mib MiB" >&2
  exit 1
fi
