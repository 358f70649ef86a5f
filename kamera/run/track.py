"""Experiment tracking through wandb, imported lazily: the harness works with wandb absent or disabled.

One wandb run per job *attempt*: a requeued or resumed job starts a new run, in the same wandb group
(the job key, so every attempt of a job sits together) with job_type = the experiment. No run id is
reused: wandb ignores ``resume`` in offline mode and offline runs sharing an id do not merge on sync,
so resumable runs would be a promise wandb cannot keep. Each attempt logs the resolved config,
per-item metrics of the items it ran and, at its end, the whole rows table of the shard. The
results store, not wandb, is the record: on compute nodes use ``mode: offline`` and ``make sync`` later.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class Tracker:
    """A no-op unless tracking is enabled and wandb imports."""

    def __init__(self, run: Any = None) -> None:
        self.run = run

    @classmethod
    def start(
        cls, mode: str, project: str, experiment: str, job_key: str, config: dict, directory: Path,
        entity: str | None = None,
    ) -> Tracker:
        """A run of ``experiment`` grouped under ``job_key`` (a no-op when disabled or wandb is absent)."""
        if mode == "disabled":
            return cls()
        if mode not in ("offline", "online"):
            raise ValueError(f"tracking.mode must be disabled, offline or online, got {mode!r}")
        try:
            import wandb
        except ImportError:
            log.warning("tracking.mode=%s but wandb is not installed (pip install -e '.[track]'); not tracking", mode)
            return cls()
        directory.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=project, entity=entity, group=job_key, job_type=experiment, tags=[experiment],
            name=f"{experiment}/{job_key}", mode=mode, dir=str(directory), config=config,
        )
        return cls(run)

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def log_table(self, key: str, frame) -> None:
        if self.run is not None:
            import wandb

            self.run.log({key: wandb.Table(dataframe=frame)})

    def log_files(self, paths: list[Path]) -> None:
        """Attach rendered tables / figures (markdown as text, images as media)."""
        if self.run is None:
            return
        import wandb

        for p in paths:
            if p.suffix == ".png":
                self.run.log({p.stem: wandb.Image(str(p))})
            elif p.suffix == ".md":
                self.run.log({p.stem: wandb.Html(f"<pre>{p.read_text()}</pre>")})

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
