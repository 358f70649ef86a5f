"""Issue 19 item 3: the media each selected item reads are in the data fingerprint, and the media cache is keyed
by content, not by a file's name and size."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from pipeline_support import job_config

from kamera import job
from kamera.data import load_items, make_fixture
from kamera.data import media as m
from kamera.job.shapes import shape_of
from kamera.provenance import digest


def key_of(tmp_path: Path, root: Path) -> str:
    cfg = job_config(tmp_path, "bench=mm_niah_reasoning", f"bench.root={root}", "arms=[blind]", "n_items=2")
    return digest(job.identity(cfg, shape_of(cfg).select(cfg, cfg.n_items)))


def test_a_changed_image_is_a_new_job(tmp_path, monkeypatch):
    monkeypatch.setenv("KAMERA_CACHE", str(tmp_path / "cache"))
    root = make_fixture("mm_niah", tmp_path / "data", n=2)
    first = key_of(tmp_path, root)
    assert key_of(tmp_path, root) == first  # unchanged media: the same key
    (item,) = load_items("mm_niah", root=root, subset="reasoning-image", n_items=1, seed=0)
    image = next(r.path for r in item.media_refs() if r.path is not None)
    with Image.open(image) as im:
        fmt, changed = im.format, im.convert("RGB")
    changed.putpixel((0, 0), tuple(255 - c for c in changed.getpixel((0, 0))))
    changed.save(image, format=fmt)  # re-extracted: other bytes, same name, annotations untouched
    assert key_of(tmp_path, root) != first


def test_the_media_cache_is_keyed_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("KAMERA_CACHE", str(tmp_path / "cache"))
    a, b, c = (tmp_path / d / "clip.mp4" for d in "abc")
    for path, data in ((a, b"x" * 64), (b, b"y" * 64), (c, b"x" * 64)):
        path.parent.mkdir()
        path.write_bytes(data)  # the same name and size; a and c byte-identical
    assert m.file_key(a) != m.file_key(b)  # a re-encoded video never reads the old one's cached frames
    assert m.file_key(a) == m.file_key(c)  # a byte-identical copy shares them
