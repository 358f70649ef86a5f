"""Reading media for the loaders: image files and bytes, video frames and audio tracks (PyAV), PDF pages
(PyMuPDF).

Video and PDF decodes are cached as PNG under a cache directory (``$KAMERA_CACHE``, else
``<benchmark root>/.kamera_cache``, else ``~/.cache/kamera``) so a sweep decodes each video frame and
renders each page once.
Cache entries are keyed by the file's content (its sha256, :func:`content_digest`) plus the frame index (or
page and dpi) and written atomically, so concurrent workers can share one cache and a re-encoded video or
re-rendered PDF under the same name and size never reads another file's frames.

Content digests (:func:`cached_sha256`) are computed once per file and cached as small JSON records keyed by
(size, inode, mtime_ns, ctime_ns): the media cache, the job's data fingerprint (the media every selected item
reads), a checkpoint's weights (:mod:`kamera.job.identity`) and an engine's model id
(:mod:`kamera.engine.store`) all read a file's bytes once, then only ``stat`` it.

Why PyAV rather than decord: PyAV is a maintained binding of FFmpeg with wheels for current Pythons
(decord's last release is from 2022 and has no wheels past Python 3.10 / arm64), it is already a
harness dependency, and it can both write (fixtures) and read (loaders) mp4.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from kamera.data.errors import ItemError, MediaError

log = logging.getLogger("kamera.data")

PDF_DPI = 144  # lmms-eval renders MMLongBench-Doc pages with PyMuPDF at 144 dpi
_SEEK_GAP_S = 2.0  # decode forward instead of seeking when the next wanted frame is this close


def cache_root(data_root: Path | None) -> Path:
    """Where decoded frames / rendered pages are cached: ``$KAMERA_CACHE``, else ``<root>/.kamera_cache``
    when the benchmark root is writable, else ``~/.cache/kamera`` (shared read-only data copies)."""
    env = os.environ.get("KAMERA_CACHE")
    if env:
        return Path(env)
    if data_root is not None and os.access(data_root, os.W_OK):
        return Path(data_root) / ".kamera_cache"
    return Path.home() / ".cache" / "kamera"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """The sha256 (64 hex) of a file's bytes, streamed: the one place whole media and weight files are read."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _stat_key(st: os.stat_result) -> dict:
    """What ties a recorded digest to one file as it is: its size, inode, mtime_ns and ctime_ns. Tools that keep or
    restore an mtime (``cp -p``, ``mv``, ``rsync -t``, tar) cannot keep the ctime: the kernel sets it on every
    write, rename and ``utime``."""
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}


def digest_record(path: Path, store: Path) -> Path:
    """Where :func:`cached_sha256` keeps ``path``'s digest under ``store`` (one small JSON per file, named by a
    digest of the file's absolute path)."""
    where = hashlib.sha1(str(Path(path).resolve()).encode()).hexdigest()[:20]
    return store / f"{where}.json"


def cached_sha256(path: Path, store: Path, rehash: bool = False) -> str:
    """``path``'s sha256, read from its record under ``store`` while the file's (size, inode, mtime_ns, ctime_ns)
    (:func:`_stat_key`) are those recorded, else computed (:func:`sha256_file`) and recorded atomically;
    ``rehash`` always recomputes. A store that cannot be written only costs the next call another read (logged)."""
    path = Path(path)
    st = path.stat()
    record = digest_record(path, store)
    if not rehash:
        try:
            cached = json.loads(record.read_text())
            if cached.get("path") == str(path.resolve()) and all(cached.get(k) == v for k, v in _stat_key(st).items()):
                return str(cached["sha256"])
        except (OSError, ValueError, KeyError, AttributeError):
            pass
    sha = sha256_file(path)
    if _stat_key(path.stat()) != _stat_key(st):  # changed while read: do not record a digest for either version
        return sha
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".json.tmp", dir=record.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump({"path": str(path.resolve()), **_stat_key(st), "sha256": sha}, fh)
        os.replace(tmp, record)
    except OSError as err:
        log.info("could not cache the digest of %s in %s (%s)", path, store, err)
    return sha


# the files of a checkpoint folder that hold weights, by suffix: a job's checkpoint fingerprint and the engine's
# weights digest both read these (with config.json)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")


def weight_files(ckpt: Path) -> list[Path]:
    """The weight files of a checkpoint folder (:data:`WEIGHT_SUFFIXES`), sorted; none for a missing folder."""
    return sorted(p for p in ckpt.glob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def digest_store(ckpt: Path) -> Path:
    """Where a checkpoint's computed weight digests are cached: ``<ckpt>/.cache/kamera/digests`` (beside the
    Hub's own ``.cache/huggingface``; a folder, so not part of the fingerprint) when the checkpoint directory is
    writable, else ``<cache>/digests`` (``$KAMERA_CACHE``, else ``~/.cache/kamera``)."""
    if os.access(ckpt, os.W_OK):
        return ckpt / ".cache" / "kamera" / "digests"
    return cache_root(None) / "digests"


def content_digest(path: Path, cache_dir: Path) -> str:
    """A media file's sha256 (16 hex), cached under ``<cache_dir>/digests`` (:func:`cached_sha256`)."""
    return cached_sha256(path, Path(cache_dir) / "digests")[:16]


def file_key(path: Path, cache_dir: Path | None = None) -> str:
    """A cache key for a media file: its stem plus a digest of its bytes (:func:`content_digest`, cached under
    ``cache_dir``), so byte-identical copies share entries and a re-encoded file under the same name and size
    does not."""
    return f"{path.stem[:60]}-{content_digest(path, cache_dir or cache_root(None))}"


def _atomic_save_png(img: Image.Image, dest: Path) -> None:
    """Write a PNG through a temporary file and rename, so readers never see a partial file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".png.tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            img.save(fh, format="PNG")
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _decode_image(opener: object, what: str) -> Image.Image:
    """Fully decode an image (path or file object) into RGB; any decoder failure becomes MediaError."""
    try:
        with Image.open(opener) as im:  # type: ignore[arg-type]
            im.load()
            return im.convert("RGB")
    except FileNotFoundError as e:
        raise MediaError(f"image file missing: {what}") from e
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise MediaError(f"cannot decode image {what}: {type(e).__name__}: {e}") from e


def open_image_file(path: Path) -> Image.Image:
    """Load an image file as RGB, raising MediaError naming the path when it is missing or corrupt."""
    return _decode_image(path, str(path))


def open_image_bytes(data: bytes, what: str) -> Image.Image:
    """Load encoded image bytes (e.g. a parquet-embedded image) as RGB."""
    return _decode_image(io.BytesIO(data), what)


# ---------------------------------------------------------------------------------------------- video


@dataclass(frozen=True)
class VideoInfo:
    """What the loaders need to sample frames: frame count, frame rate, duration."""

    n_frames: int
    fps: float
    duration_s: float


def probe_video(path: Path) -> VideoInfo:
    """Read a video's frame count and rate from its container (no decoding); MediaError if unreadable."""
    st = path.stat() if path.exists() else None
    if st is None:
        raise MediaError(f"video file missing: {path}")
    return _probe_video(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=4096)
def _probe_video(path: str, _size: int, _mtime: int) -> VideoInfo:
    import av

    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise MediaError(f"no video stream in {path}")
            stream = container.streams.video[0]
            fps = float(stream.average_rate or stream.guessed_rate or 0.0)
            n = int(stream.frames or 0)
            if n <= 0:  # some containers do not record a frame count: count packets (demux only)
                n = sum(1 for p in container.demux(stream) if p.size > 0)
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            else:
                duration = n / fps if fps else 0.0
    except MediaError:
        raise
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise MediaError(f"cannot open video {path}: {type(e).__name__}: {e}") from e
    if fps <= 0:
        raise MediaError(f"video {path} reports no frame rate")
    return VideoInfo(n_frames=n, fps=fps, duration_s=duration)


def sample_frame_indices(n_total: int, n_frames: int, what: str = "video") -> list[int]:
    """Uniformly spaced frame indices over the whole video (``linspace(0, n-1, k)`` floored, as lmms-eval
    samples ``frame_num`` frames); ItemError when the video has fewer frames than asked for."""
    if n_frames < 2:
        raise ValueError(f"n_frames must be >= 2 to split frames into A and B, got {n_frames}")
    if n_total < n_frames:
        raise ItemError(f"{what} has {n_total} frames, fewer than the {n_frames} asked for")
    return [int(i) for i in np.linspace(0, n_total - 1, n_frames).astype(int)]


def _frame_cache_path(cache_dir: Path, video: Path, index: int) -> Path:
    return cache_dir / "frames" / file_key(video, cache_dir) / f"{index:07d}.png"


def video_frame(path: Path, index: int, group: tuple[int, ...], cache_dir: Path) -> Image.Image:
    """One decoded frame; on a cache miss the whole ``group`` (the item's sampled frames) is decoded
    and cached in one pass, so each video is decoded once per sampling."""
    if not path.exists():
        raise MediaError(f"video file missing: {path}")
    dest = _frame_cache_path(cache_dir, path, index)
    if not dest.exists():
        wanted = sorted({index, *group})
        missing = [i for i in wanted if not _frame_cache_path(cache_dir, path, i).exists()]
        _decode_frames_to_cache(path, missing, cache_dir)
    return open_image_file(dest)


def _decode_frames_to_cache(path: Path, indices: list[int], cache_dir: Path) -> None:
    """Decode the given frame indices (seeking between distant ones) and write each as PNG."""
    import av

    if not indices:
        return
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            fps = float(stream.average_rate or stream.guessed_rate)
            tb = float(stream.time_base)
            start = stream.start_time or 0
            frames = None
            position = -1  # index of the last decoded frame
            for idx in indices:
                if frames is None or (idx - position) / fps > _SEEK_GAP_S:
                    container.seek(int(start + (idx / fps) / tb), stream=stream, backward=True)
                    frames = container.decode(stream)
                for frame in frames:
                    position = (
                        round((frame.pts - start) * tb * fps) if frame.pts is not None else position + 1
                    )
                    if position >= idx:
                        _atomic_save_png(frame.to_image(), _frame_cache_path(cache_dir, path, idx))
                        break
                else:
                    raise MediaError(f"video {path} ended before frame {idx} (last decoded frame {position})")
    except MediaError:
        raise
    except (av.error.FFmpegError, OSError, ValueError, IndexError) as e:
        raise MediaError(f"cannot decode video {path}: {type(e).__name__}: {e}") from e


# ---------------------------------------------------------------------------------------------- audio

AUDIO_RATE = 16000  # Hz: what the Whisper-style feature extractors of the omni models read (mono)


def read_audio(
    source: Path | bytes, what: str, *, sampling_rate: int = AUDIO_RATE, start_s: float = 0.0,
    duration_s: float | None = None,
) -> np.ndarray:
    """Mono float32 samples at ``sampling_rate`` of an audio file, a video's audio track or encoded bytes (WAV,
    …), from ``start_s`` for ``duration_s`` seconds (None: to the end): decoded with PyAV and resampled by
    FFmpeg's resampler (``av.AudioResampler``; several channels take its default mono downmix). Not cached: a few
    seconds of audio decode in milliseconds. MediaError naming ``what`` when the file is missing, holds no audio stream,
    does not decode, or has no samples in the range."""
    import av

    if isinstance(source, Path) and not source.exists():
        raise MediaError(f"audio file missing: {source}")
    if sampling_rate <= 0 or start_s < 0 or (duration_s is not None and duration_s <= 0):
        raise ValueError(f"{what}: bad audio range (rate {sampling_rate}, start {start_s}, duration {duration_s})")
    want = None if duration_s is None else round(duration_s * sampling_rate)
    chunks: list[np.ndarray] = []
    got, first = 0, None
    try:
        with av.open(str(source) if isinstance(source, Path) else io.BytesIO(source)) as container:
            if not container.streams.audio:
                raise MediaError(f"no audio stream in {what}")
            stream = container.streams.audio[0]
            tb, t0 = float(stream.time_base), stream.start_time or 0
            if start_s > 0:
                container.seek(int(t0 + start_s / tb), stream=stream, backward=True)
            resampler = av.AudioResampler(format="flt", layout="mono", rate=sampling_rate)
            for frame in container.decode(stream):
                if first is None:
                    first = (frame.pts - t0) * tb if frame.pts is not None else 0.0
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
                    got += chunks[-1].size
                if want is not None and got >= want + round((start_s - first) * sampling_rate):
                    break
            else:
                chunks += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    except MediaError:
        raise
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise MediaError(f"cannot decode audio of {what}: {type(e).__name__}: {e}") from e
    samples = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    skip = max(0, round((start_s - (first or 0.0)) * sampling_rate))
    samples = samples[skip : None if want is None else skip + want]
    if samples.size == 0:
        raise MediaError(f"{what} has no audio samples from {start_s:.2f} s")
    return np.ascontiguousarray(samples, dtype=np.float32)


# ------------------------------------------------------------------------------------------------ pdf


def pdf_page_count(path: Path) -> int:
    """Number of pages of a PDF (cached per file); MediaError when it is missing or unreadable."""
    if not path.exists():
        raise MediaError(f"PDF file missing: {path}")
    st = path.stat()
    return _pdf_page_count(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=1024)
def _pdf_page_count(path: str, _size: int, _mtime: int) -> int:
    import pymupdf

    try:
        with pymupdf.open(path) as doc:
            return doc.page_count
    except (RuntimeError, ValueError) as e:  # pymupdf.FileDataError is a RuntimeError
        raise MediaError(f"cannot open PDF {path}: {type(e).__name__}: {e}") from e


def pdf_page(path: Path, page: int, dpi: int, cache_dir: Path) -> Image.Image:
    """Render one 1-based PDF page at ``dpi`` with PyMuPDF, cached as PNG."""
    import pymupdf

    if not path.exists():
        raise MediaError(f"PDF file missing: {path}")
    dest = cache_dir / "pages" / file_key(path, cache_dir) / f"p{page:05d}@{dpi}.png"
    if not dest.exists():
        try:
            with pymupdf.open(str(path)) as doc:
                if not 1 <= page <= doc.page_count:
                    raise MediaError(f"PDF {path} has {doc.page_count} pages, page {page} asked for")
                pix = doc.load_page(page - 1).get_pixmap(dpi=dpi, alpha=False)
                img = Image.frombytes("RGB", (pix.width, pix.height), pix.samples)
        except MediaError:
            raise
        except (RuntimeError, ValueError) as e:  # pymupdf.FileDataError is a RuntimeError
            raise MediaError(f"cannot render page {page} of PDF {path}: {type(e).__name__}: {e}") from e
        _atomic_save_png(img, dest)
        return img
    return open_image_file(dest)
