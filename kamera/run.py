"""``python -m kamera.run``: the Hydra entry point (thin; the job lives in ``kamera.runner``).

    python -m kamera.run model=tiny_kimi bench=synthetic 'arms=[reprefill,blind,patch_r16]' n_items=8
    python -m kamera.run -m experiment=table3_tiny                      # a sweep, one job per testbed
    python -m kamera.run -m experiment=table3 launcher=slurm_h100       # the same sweep as a Slurm array
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from kamera.sweep import CONF_DIR


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from kamera.runner import run

    run(cfg)


if __name__ == "__main__":
    main()
