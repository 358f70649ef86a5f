"""Experiment tracking through wandb, imported lazily: the harness works with wandb absent or disabled.

One wandb run per job: group = experiment, id = ``cfg-<config hash>`` with ``resume="allow"`` (a
requeued job continues its run instead of starting a duplicate), the resolved config logged. On
compute nodes use ``mode: offline`` and ``make sync`` later.
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
        cls, mode: str, project: str, group: str, digest: str, config: dict, directory: Path, entity: str | None = None
    ) -> Tracker:
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
            project=project, entity=entity, group=group, job_type=config.get("model", {}).get("name"),
            id=f"cfg-{digest}", resume="allow", mode=mode, dir=str(directory), config=config,
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
