"""``python -m kamera.run``: the Hydra entry point (thin; the job lives in :mod:`kamera.run.runner`).

    python -m kamera.run model=tiny_kimi bench=synthetic 'arms=[reprefill,blind,patch_r16]' n_items=8
    python -m kamera.run -m experiment=table3_tiny                      # a sweep, one job per testbed
    python -m kamera.run -m experiment=table3 launcher=slurm_h100       # the same sweep as a Slurm array

A job that cannot start or ends incomplete exits non-zero with its reasons and no traceback; in a
multirun it is reported as failed after the other jobs ran (Hydra raises the first failure at the end).
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from kamera.job.spec import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from kamera.job import JobError
    from kamera.job.store import ShardCorruptError, ShardLockedError
    from kamera.run.runner import run

    try:
        run(cfg)
    except (JobError, ShardCorruptError, ShardLockedError) as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # Hydra records the job as failed, runs the others, and raises at the end
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main()
