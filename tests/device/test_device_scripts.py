"""The device run's shell steps (docs/gpu.md) without a registry or a GPU: scripts/device_run.sh installs the carried
bundle with pip --no-index and puts it first on the path, refuses a missing or corrupt bundle; scripts/device_wheels.sh
keeps an up-to-date bundle without a download and refuses one over the size limit."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration  # subprocess command lines


def _wheel(folder: Path, name: str = "kamera_probe") -> Path:
    """A minimal pure-Python wheel whose module says where it was imported from."""
    path = folder / f"{name}-0.0.0-py3-none-any.whl"
    info = f"{name}-0.0.0.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "WHERE = __file__\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.0\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", f"{name}/__init__.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    return path


def _bundle(folder: Path, spec: str = "kamera_probe==0.0.0") -> Path:
    folder.mkdir()
    whl = _wheel(folder)
    (folder / "SHA256SUMS").write_text(f"{hashlib.sha256(whl.read_bytes()).hexdigest()}  {whl.name}\n")
    (folder / "BUNDLE").write_text(spec + "\n")
    return folder


def _run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", f"scripts/{script}", *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_device_run_installs_the_bundle_first_on_the_path(tmp_path):
    bundle = _bundle(tmp_path / "wheels")
    # a python that installs with the real pip, then, where the device runs gpu_check.py, reports what it imports
    fake = tmp_path / "python"
    fake.write_text(
        f'#!/usr/bin/env bash\nif [ "$1" = -m ]; then exec {sys.executable} "$@"; fi\n'
        f'exec {sys.executable} -c "import kamera_probe, sys; print(kamera_probe.WHERE); print(sys.argv[1:])" "$@"\n'
    )
    fake.chmod(0o755)
    done = _run("device_run.sh", "--paper", "--out", "somewhere", PYTHON=str(fake), KAMERA_BUNDLE=str(bundle))
    assert done.returncode == 0, done.stderr
    where, argv = done.stdout.splitlines()[-2:]
    assert "/kamera-site." in where and argv == "['scripts/gpu_check.py', '--paper', '--out', 'somewhere']"
    assert not Path(where).exists()  # the install folder is removed when the run ends


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_device_run_refuses_a_missing_or_corrupt_bundle(tmp_path, damage):
    bundle = tmp_path / "wheels"
    if damage == "corrupt":
        _bundle(bundle)
        whl = next(bundle.glob("*.whl"))
        whl.write_bytes(whl.read_bytes()[:-10])  # a transfer cut short
    else:
        bundle.mkdir()
    done = _run("device_run.sh", "--paper", KAMERA_BUNDLE=str(bundle))
    assert done.returncode == 2
    assert ("SHA256SUMS" if damage == "corrupt" else "no wheels in") in done.stderr


def _floor() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return re.search(r">=\s*([0-9.]+)", next(d for d in deps if d.startswith("transformers"))).group(1)


def test_device_wheels_keeps_an_up_to_date_bundle_and_reports_what_travels(tmp_path):
    bundle = _bundle(tmp_path / "wheels", spec=f"transformers=={_floor()}")
    done = _run("device_wheels.sh", KAMERA_BUNDLE=str(bundle))
    assert done.returncode == 0, done.stderr
    assert "bundle up to date" in done.stdout and re.search(r"= [0-9.]+ MiB of 64 MiB", done.stdout)


def test_device_wheels_refuses_a_bundle_over_the_limit(tmp_path):
    bundle = _bundle(tmp_path / "wheels", spec=f"transformers=={_floor()}")
    big = bundle / "big-0.0.0-py3-none-any.whl"
    with big.open("wb") as f:
        f.truncate(33 << 20)
    with (bundle / "SHA256SUMS").open("a") as f:
        f.write(f"{hashlib.sha256(big.read_bytes()).hexdigest()}  {big.name}\n")
    done = _run("device_wheels.sh", KAMERA_BUNDLE=str(bundle))
    assert done.returncode == 1 and "over the limit" in done.stderr
