# Sourced by scripts/vllm034_venv.sh and scripts/sglang_venv.sh: a side venv with CPU torch and one engine wheel
# installed --no-deps, the steps both take. After `side_venv VENV TORCH NAME`: $py (the venv's python), the array $pip
# (a quiet pip install), $pins (a constraints file holding the installed torch, removed on exit).
#   side_venv VENV TORCH NAME       the venv (created if absent) with torch==TORCH+cpu, refusing any other torch
#   side_wheel WHEELS DIST VERSION  DIST==VERSION from its wheel (downloaded once into WHEELS), --no-deps

side_venv() {
    local venv="$1" torch="$2" name="$3" have
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    py="$venv/bin/python"
    pip=("$py" -m pip install -q --disable-pip-version-check)
    pins="$(mktemp)"
    trap 'rm -f "$pins"' EXIT
    have="$("$py" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
    case "$have" in
        "$torch+cpu") echo "$name: keeping torch $have" ;;
        "") "${pip[@]}" "torch==$torch+cpu" ;;
        *) echo "$name: $venv has torch $have, not $torch+cpu: remove it and rerun" >&2; exit 2 ;;
    esac
    echo "torch==$("$py" -c 'import importlib.metadata as m; print(m.version("torch"))')" >"$pins"
}

side_wheel() {
    local wheels="$1" dist="$2" version="$3" wheel have
    wheel="$(ls "$wheels/$dist-$version"-*.whl 2>/dev/null | head -1 || true)"
    if [ -z "$wheel" ]; then
        mkdir -p "$wheels"
        "$py" -m pip download -q --disable-pip-version-check --no-deps -d "$wheels" "$dist==$version"
        wheel="$(ls "$wheels/$dist-$version"-*.whl | head -1)"
    fi
    have="$("$py" -c "import importlib.metadata as m; print(m.version('$dist'))" 2>/dev/null || true)"
    [ "$have" = "$version" ] || "${pip[@]}" --no-deps "$wheel"
}
