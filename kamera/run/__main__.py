"""``python -m kamera.run``: the Hydra entry point (thin; the job lives in :mod:`kamera.run.runner`).

    python -m kamera.run model=tiny_kimi bench=synthetic 'arms=[reprefill,blind,patch_r16]' n_items=8
    python -m kamera.run -m experiment=table3_tiny                      # a sweep, one job per testbed
    python -m kamera.run -m experiment=table3 launcher=slurm_h100       # the same sweep as a Slurm array

A job that cannot start, ends incomplete or cannot write its shard (a full disk) exits non-zero with its reasons
and no traceback (a run folder that cannot be made, under KAMERA_OUTPUTS, is one line before Hydra
starts); in a multirun it is reported as failed after the other jobs ran (Hydra raises the first failure
at the end). SIGTERM ends it through its cleanup (:mod:`kamera.run.signals`).
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
    from kamera.job.checks import added_keys_that_exist
    from kamera.job.store import ShardCorruptError, ShardLockedError, StoreWriteError
    from kamera.run.runner import run
    from kamera.run.signals import terminate_as_exit

    try:
        added = added_keys_that_exist(list(HydraConfig.get().overrides.task))
        if added:
            raise JobError("cannot start this job:\n- " + "\n- ".join(added))
        with terminate_as_exit():  # a kill or a Slurm timeout ends the job through its cleanup
            run(cfg)
    except (JobError, ShardCorruptError, ShardLockedError, StoreWriteError) as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            raise  # Hydra records the job as failed, runs the others, and raises at the end
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    from kamera.job.checks import outputs_problem

    if problem := outputs_problem(sys.argv[1:]):  # Hydra writes the run folder before main runs: check it first
        sys.exit(f"error: {problem}")
    main()
