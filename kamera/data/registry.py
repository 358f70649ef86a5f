"""The benchmark registry (every module of :mod:`kamera.data` with a ``SPEC``) and the single entry point
:func:`load_items`.

Root resolution: an explicit ``root`` is the benchmark's own directory; otherwise
``$KAMERA_DATA/<dir name>`` (``MM-NIAH``, ``MileBench``, ``MuirBench``, ``Video-MME``, ``EgoSchema``,
``MMLongBench-Doc``, ``MuSiQue``). A missing root or file raises :class:`BenchmarkDataMissing` naming
the path tried, the expected files and where the benchmark is published. Loaders read local files
only; the Hugging Face offline flags are set while loading (and restored after, so model downloads
elsewhere in the process are unaffected).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kamera.data.base import Benchmark, LoadContext
from kamera.data.errors import BenchmarkDataMissing
from kamera.data.media import cache_root
from kamera.data.schema import ChunkedItem
from kamera.data.selection import LoadedItems, LoadReport, select_rows
from kamera.discover import declared

# Every module of kamera.data with a module-level SPEC (a Benchmark), by name, in module order: adding a benchmark
# is adding its module (and its conf/bench file), nothing here (kamera.discover, the rule arms and probes follow).
BENCHMARKS: dict[str, Benchmark] = declared("kamera.data", Benchmark, skip=("registry",))

_OFFLINE_FLAGS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


@contextmanager
def offline() -> Iterator[None]:
    """Set the Hugging Face offline flags for the duration of a load, then restore them."""
    saved = {k: os.environ.get(k) for k in _OFFLINE_FLAGS}
    os.environ.update(dict.fromkeys(_OFFLINE_FLAGS, "1"))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def get_benchmark(bench: str) -> Benchmark:
    """The registry entry of ``bench``; ValueError listing the valid names."""
    try:
        return BENCHMARKS[bench]
    except KeyError:
        raise ValueError(f"unknown benchmark {bench!r}; valid names: {sorted(BENCHMARKS)}") from None


def default_root(spec: Benchmark, root: str | Path | None) -> Path | None:
    """Where the benchmark directory is looked for: ``root`` if given, else ``$KAMERA_DATA/<dir name>``; None
    when neither is set. Whether it exists is :func:`resolve_root`'s question."""
    if root is not None:
        return Path(root).expanduser()
    if os.environ.get("KAMERA_DATA"):
        return Path(os.environ["KAMERA_DATA"]).expanduser() / str(spec.dir_name)
    return None


def resolve_root(spec: Benchmark, root: str | Path | None) -> Path:
    """The benchmark directory (:func:`default_root`); it must exist."""
    path = default_root(spec, root)
    why = "benchmark root (root=) does not exist" if root is not None else "benchmark root does not exist"
    if path is None:
        raise BenchmarkDataMissing(
            spec.name,
            f"$KAMERA_DATA/{spec.dir_name}",
            spec.expected_files,
            spec.source,
            "no root= given and KAMERA_DATA is not set",
        )
    if not path.is_dir():
        raise BenchmarkDataMissing(spec.name, path, spec.expected_files, spec.source, why)
    return path


def load_items(
    bench: str,
    *,
    root: str | Path | None = None,
    subset: str | None = None,
    split: str | None = None,
    n_items: int | None = None,
    seed: int = 0,
    max_tokens: int | None = None,
    length_fn: Callable[[ChunkedItem], int] | None = None,
    verify_media: bool = True,
    strict: bool = False,
    cache_dir: str | Path | None = None,
    **bench_kwargs: Any,
) -> LoadedItems:
    """Load, select and validate items of one benchmark from local files.

    ``subset`` may name several subsets (``"a,b"``); ``None`` takes the benchmark's defaults. Items are
    chosen in a seeded, stable order (see ``kamera.data.selection``) and returned sorted by id, with
    the :class:`LoadReport` as ``.report``. ``max_tokens`` drops items whose ``length_fn`` exceeds it;
    ``verify_media`` decodes every image of each selected item so corrupt files are skipped at load
    time, not mid-sweep; ``strict`` raises on the first bad row instead of skipping it.
    ``bench_kwargs`` are the benchmark's own options (documented in its module).
    """
    spec = get_benchmark(bench)
    subsets = spec.resolve_subsets(subset)
    split = spec.resolve_split(split)
    if n_items is not None and n_items < 0:
        raise ValueError(f"n_items must be >= 0, got {n_items}")
    if max_tokens is not None and length_fn is None:
        raise ValueError("max_tokens needs a length_fn that encodes an item (the adapters' tokenizer)")
    with offline():
        data_root = resolve_root(spec, root) if spec.dir_name else None
        cache = Path(cache_dir) if cache_dir is not None else cache_root(data_root)
        report = LoadReport(bench, subsets, split, data_root, seed)
        candidates = []
        for name in subsets:
            ctx = LoadContext(spec, data_root, name, split, seed, report, cache, n_items)
            candidates += list(spec.rows(ctx, **bench_kwargs))
        return select_rows(
            candidates,
            report,
            n_items=n_items,
            seed=seed,
            max_tokens=max_tokens,
            length_fn=length_fn,
            verify_media=verify_media,
            strict=strict,
        )


def make_fixture(bench: str, root: str | Path, n: int = 3, seed: int = 0, **kwargs: Any) -> Path:
    """Write a tiny copy of ``bench`` in its real on-disk layout under ``root/<dir name>``; returns that
    directory (usable as ``root=`` or, with ``KAMERA_DATA=root``, found automatically)."""
    spec = get_benchmark(bench)
    if spec.fixture is None or spec.dir_name is None:
        raise ValueError(f"{bench} is generated in memory and needs no fixture files")
    target = Path(root) / spec.dir_name
    target.mkdir(parents=True, exist_ok=True)
    return spec.fixture(target, n, seed, **kwargs)
