"""Shared pieces of the test fixtures: tiny images, mp4 files and PDFs whose content encodes an index.

Each benchmark module writes its own tiny copy in the real on-disk layout and field names
(``write_fixture``) with these helpers; :func:`kamera.data.make_fixture` dispatches to them. Pictures
carry their index as eight black/white bars (bit 0 leftmost), which survive video compression and PDF
rendering, so tests can assert which frame or page a loader picked with :func:`read_index`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

N_BITS = 8


def index_image(
    index: int, size: tuple[int, int] = (64, 48), tint: tuple[int, int, int] = (0, 0, 0)
) -> Image.Image:
    """An RGB image whose top three quarters are 8 bars spelling ``index`` in binary (white = 1) and
    whose bottom quarter is ``tint`` with the index written in it."""
    if not 0 <= index < 2**N_BITS:
        raise ValueError(f"index must be in [0, {2**N_BITS}), got {index}")
    w, h = size
    arr = np.zeros((h, w, 3), np.uint8)
    arr[int(h * 0.75) :] = tint
    bar = w // N_BITS
    for b in range(N_BITS):
        if (index >> b) & 1:
            arr[: int(h * 0.75), b * bar : (b + 1) * bar] = 255
    img = Image.fromarray(arr)
    ImageDraw.Draw(img).text((2, int(h * 0.75)), str(index), fill=(255, 255, 255))
    return img


def read_index(img: Image.Image) -> int:
    """The index :func:`index_image` drew (read from the bar centres; robust to resizing and codecs)."""
    arr = np.asarray(img.convert("L"), dtype=np.float32)
    h, w = arr.shape
    band = arr[int(h * 0.1) : int(h * 0.6)]
    bar = w / N_BITS
    bits = [band[:, int((b + 0.5) * bar)].mean() > 127 for b in range(N_BITS)]
    return sum(1 << b for b, on in enumerate(bits) if on)


def png_bytes(img: Image.Image) -> bytes:
    """PNG-encode an image."""
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def save_png(img: Image.Image, path: Path) -> None:
    """Write an image as PNG, creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="PNG")


def write_mp4(
    path: Path, n_frames: int, fps: int = 8, size: tuple[int, int] = (64, 48), gop: int = 4,
    tone_hz: float | None = None, audio_rate: int = 16000,
) -> None:
    """An H.264 mp4 (PyAV) whose frame ``i`` shows index ``i``, with a keyframe every ``gop`` frames; with
    ``tone_hz``, also an AAC audio track of that tone (amplitude 0.5, mono at ``audio_rate``) as long as the video."""
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "12", "g": str(gop)}
        sound = None if tone_hz is None else out.add_stream("aac", rate=audio_rate, layout="mono")
        for i in range(n_frames):
            frame = av.VideoFrame.from_image(index_image(i, size))
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
        if sound is not None:
            t = np.arange(round(n_frames / fps * audio_rate)) / audio_rate
            wave = (0.5 * np.sin(2 * np.pi * tone_hz * t)).astype(np.float32)
            for start in range(0, wave.size, 1024):  # the AAC encoder's frame size
                block = np.zeros((1, 1024), np.float32)
                block[0, : wave.size - start] = wave[start : start + 1024]
                frame = av.AudioFrame.from_ndarray(block, format="fltp", layout="mono")
                frame.sample_rate, frame.pts = audio_rate, start
                out.mux(sound.encode(frame))
            out.mux(sound.encode(None))


def write_pdf(path: Path, n_pages: int, size_pt: tuple[int, int] = (160, 120)) -> None:
    """A PDF (PyMuPDF) whose page ``k`` (1-based) shows index ``k`` as bars plus the text "PAGE k"."""
    import pymupdf

    path.parent.mkdir(parents=True, exist_ok=True)
    with pymupdf.open() as doc:
        for k in range(1, n_pages + 1):
            page = doc.new_page(width=size_pt[0], height=size_pt[1])
            page.insert_image(page.rect, stream=png_bytes(index_image(k, (size_pt[0], size_pt[1]))))
            page.insert_text((4, size_pt[1] - 6), f"PAGE {k}", fontsize=9, color=(1, 1, 1))
        doc.save(str(path))


def write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    """Rows as a parquet file (pyarrow infers the schema, as ``Dataset.to_parquet`` does for plain fields)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    """One JSON object per line, ``json.dumps`` defaults (as MuSiQue and MM-NIAH ship them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
