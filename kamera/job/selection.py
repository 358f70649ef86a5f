"""Reading a data benchmark as a job reads it: its directory, and the loader's selection with the annotation
files it opened and the rows it skipped (a :class:`~kamera.items.selection.Selection`)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from kamera.items.selection import Selection
from kamera.job.spec import JobError


def bench_root(cfg: DictConfig, dir_name: str | None) -> Path | None:
    """The benchmark directory: bench.root, else <paths.data>/``dir_name`` (the benchmark's directory name)."""
    if cfg.bench.root:
        return Path(cfg.bench.root)
    return Path(cfg.paths.data) / dir_name if cfg.paths.data and dir_name else None


def read_benchmark(name: str, root: Path | None, cfg: DictConfig, n: int | None, kwargs: dict) -> Selection:
    """The loader's selection of benchmark ``name`` (its ``ChunkedItem``s, the annotation files it read, what
    it skipped and why); JobError naming missing or unreadable data."""
    from kamera.data import BenchmarkDataMissing, load_items
    from kamera.data.base import media_files, recording_reads

    try:
        with recording_reads() as files:
            loaded = load_items(name, root=root, subset=cfg.bench.subset, split=cfg.bench.split, n_items=n,
                                seed=cfg.seed, **kwargs)
    except BenchmarkDataMissing as err:
        raise JobError(str(err)) from None
    except (ValueError, TypeError, OSError) as err:
        where = f" under {root}" if root else ""
        raise JobError(f"{cfg.bench.name}: cannot read the benchmark{where}: {err}") from None
    r = loaded.report
    skipped = [{"item_id": s.item_id, "reason": s.reason, "stage": s.stage} for s in r.skipped]
    return Selection(list(loaded), r.root, list(files), skipped, n, r.summary(), media_files(list(loaded)))
