"""Compose configs and expand an experiment's sweep without launching it.

    python -m kamera.sweep --check experiment=table3          # preflight every job: fail fast, list all problems
    python -m kamera.sweep --manifest experiment=table3       # one line of overrides per job (for SLURM/array.sbatch)

Both read ``hydra.sweeper.params`` of the composed config, exactly as ``python -m kamera.run -m`` would.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def compose_config(overrides: list[str] | None = None, hydra_config: bool = False) -> DictConfig:
    """The job config ``python -m kamera.run <overrides>`` would see (no output dirs created)."""
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides or []), return_hydra_config=hydra_config)


def expand(overrides: list[str] | None = None) -> list[list[str]]:
    """The per-job override lists of a multirun: the sweeper params' cartesian product, after ``overrides``.

    Sweep values given on the command line (``model=a,b``) take precedence over the experiment's.
    """
    overrides = list(overrides or [])
    parser = OverridesParser.create()
    cli = parser.parse_overrides(overrides)
    fixed = [o.input_line for o in cli if not o.is_sweep_override()]
    axes: dict[str, list[str]] = {}
    cfg = compose_config(fixed, hydra_config=True)
    for key, value in (cfg.hydra.sweeper.params or {}).items():
        o = parser.parse_override(f"{key}={value}")
        axes[key] = list(o.sweep_string_iterator()) if o.is_sweep_override() else [str(value)]
    for o in cli:
        if o.is_sweep_override():
            axes[o.get_key_element()] = list(o.sweep_string_iterator())
    keys = list(axes)
    fixed = [o for o in fixed if o.split("=", 1)[0].lstrip("+~") not in keys]
    return [fixed + [f"{k}={v}" for k, v in zip(keys, combo, strict=True)] for combo in itertools.product(*axes.values())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Expand or preflight a kamera sweep.")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="preflight every job (models, data, arms)")
    mode.add_argument("--manifest", action="store_true", help="print one override line per job")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    jobs = expand(args.overrides)
    if args.manifest:
        for job in jobs:
            print(" ".join(job))
        return 0
    from kamera.runner import preflight

    problems: dict[str, list[str]] = {}
    for job in jobs:
        for p in preflight(compose_config(job)):
            problems.setdefault(p, []).append(" ".join(job))
    if not problems:
        print(f"preflight ok: {len(jobs)} job(s)")
        return 0
    print(f"preflight failed: {len(problems)} problem(s) across {len(jobs)} job(s)", file=sys.stderr)
    for p, where in problems.items():
        print(f"- {p}\n    (jobs: {'; '.join(where[:3])}{' …' if len(where) > 3 else ''})", file=sys.stderr)
    return 1


def to_dict(cfg: DictConfig) -> dict:
    """The resolved config as plain containers."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


if __name__ == "__main__":
    sys.exit(main())
