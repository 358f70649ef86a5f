"""Media readers: seek-based frame decoding, the frame and page caches, and their error cases."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kamera.data import ItemError, MediaError
from kamera.data import media as m
from kamera.data.fixtures import read_index, write_mp4, write_pdf


def test_sample_frame_indices() -> None:
    assert m.sample_frame_indices(10, 4) == [0, 3, 6, 9]
    assert m.sample_frame_indices(4, 4) == [0, 1, 2, 3]
    with pytest.raises(ItemError, match="has 3 frames, fewer than the 4 asked for"):
        m.sample_frame_indices(3, 4)
    with pytest.raises(ValueError, match="n_frames must be >= 2"):
        m.sample_frame_indices(10, 1)


def test_distant_frames_are_reached_by_seeking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    video = tmp_path / "long.mp4"
    write_mp4(video, 250, fps=8, gop=50)  # 31 s, keyframes every 6 s, B-frames
    info = m.probe_video(video)
    assert (info.n_frames, info.fps) == (250, 8.0)
    idx = m.sample_frame_indices(info.n_frames, 7)  # ~5 s apart: each one a seek
    assert [read_index(m.video_frame(video, i, tuple(idx), tmp_path / "c")) for i in idx] == idx
    cached = sorted((tmp_path / "c" / "frames").glob("*/*.png"))
    assert [int(p.stem) for p in cached] == idx
    monkeypatch.setattr(m, "_decode_frames_to_cache", lambda *a: pytest.fail("decoded again"))
    copy = tmp_path / "copy" / "long.mp4"  # same name and size: same cache entry
    copy.parent.mkdir()
    copy.write_bytes(video.read_bytes())
    assert read_index(m.video_frame(copy, idx[3], tuple(idx), tmp_path / "c")) == idx[3]


def test_video_errors(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="video file missing"):
        m.probe_video(tmp_path / "none.mp4")
    (tmp_path / "bad.mp4").write_bytes(b"\x00" * 64)
    with pytest.raises(MediaError, match="cannot open video"):
        m.probe_video(tmp_path / "bad.mp4")
    write_mp4(tmp_path / "short.mp4", 5)
    with pytest.raises(MediaError, match="ended before frame 9"):
        m.video_frame(tmp_path / "short.mp4", 9, (9,), tmp_path / "c")


def test_pdf_pages_render_and_cache(tmp_path: Path) -> None:
    pdf = tmp_path / "doc.pdf"
    write_pdf(pdf, 3)
    assert m.pdf_page_count(pdf) == 3
    page = m.pdf_page(pdf, 2, 72, tmp_path / "c")
    assert page.size == (160, 120) and read_index(page) == 2
    assert (tmp_path / "c" / "pages" / m.file_key(pdf) / "p00002@72.png").exists()
    assert read_index(m.pdf_page(pdf, 2, 72, tmp_path / "c")) == 2  # from the cache
    with pytest.raises(MediaError, match="has 3 pages, page 4 asked for"):
        m.pdf_page(pdf, 4, 72, tmp_path / "c")


def test_cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAMERA_CACHE", raising=False)
    assert m.cache_root(tmp_path) == tmp_path / ".kamera_cache"
    monkeypatch.setattr(os, "access", lambda *a: False)  # a read-only shared copy
    assert m.cache_root(tmp_path) == Path.home() / ".cache" / "kamera"
    monkeypatch.setenv("KAMERA_CACHE", str(tmp_path / "elsewhere"))
    assert m.cache_root(tmp_path) == tmp_path / "elsewhere"
