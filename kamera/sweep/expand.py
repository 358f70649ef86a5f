"""Compose configs and expand a sweep exactly as ``python -m kamera.run -m`` would, without launching it.

    python -m kamera.sweep --check experiment=table3          # preflight every job: fail fast, list all problems
    python -m kamera.sweep --manifest experiment=table3       # one shell-quoted line of overrides per job

The job list is Hydra's own: the config is composed in multirun mode, the configured sweeper
(``hydra.sweeper.params`` of the experiment merged with the command line's sweeps) expands it, every job is
checked to compose (through the memo, so callers that then compose each job do it once), and only the launcher
is replaced by one that records the jobs instead of running them (the path of
``hydra/_internal/hydra.py:Hydra.multirun``). A manifest line is ``shlex.join`` of one job's overrides, so
values with spaces or quotes survive ``SLURM/array.sbatch``. An unknown experiment, testbed or other config
choice is an error that lists the valid names.
"""

from __future__ import annotations

import argparse
import copy
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import TypeVar

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from hydra.types import HydraContext, RunMode
from omegaconf import DictConfig, OmegaConf

from kamera.job import CONF_DIR, preflight
from kamera.job.checks import added_keys_that_exist


class SweepError(ValueError):
    """A sweep that cannot be composed (an unknown config choice, a bad override); Hydra's message."""


T = TypeVar("T")
_MEMO: dict[tuple, object] = {}


def _conf_state() -> tuple:
    """Everything a composition reads besides its overrides: each file under conf/ (path, size, mtime_ns). The
    environment is not part of it: conf/ reads KAMERA_* only through ``${oc.env:…}`` interpolations, which a
    composed config keeps unresolved and resolves when read, so a cached config follows the environment of the
    moment it is read (tests/pipeline/test_sweep.py pins this)."""
    return tuple(sorted((str(p), st.st_size, st.st_mtime_ns) for p in CONF_DIR.rglob("*") if p.is_file()
                        for st in (p.stat(),)))


def _memo(kind: str, key: tuple, make: Callable[[], T]) -> T:
    """``make()`` once per (kind, key, state of conf/): Hydra re-reads and re-parses every YAML file of conf/ on
    each composition (~0.3 s), and status, preflight, the cost estimate and the tests compose the same jobs
    again and again. Callers get a deep copy, so a config they change never changes the cached one."""
    full = (kind, key, _conf_state())
    if full not in _MEMO:
        if len(_MEMO) > 4096:
            _MEMO.clear()
        _MEMO[full] = make()
    return copy.deepcopy(_MEMO[full])  # type: ignore[return-value]


def compose_config(overrides: Sequence[str] | None = None, hydra_config: bool = False) -> DictConfig:
    """The job config ``python -m kamera.run <overrides>`` would see (no output dirs created)."""
    return _memo("compose", (tuple(overrides or []), hydra_config), lambda: _compose(overrides, hydra_config))


def _compose(overrides: Sequence[str] | None, hydra_config: bool) -> DictConfig:
    try:
        with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
            return compose("config", overrides=list(overrides or []), return_hydra_config=hydra_config)
    except HydraException as err:
        raise SweepError(str(err)) from None


class _Recorder:
    """Stands in for the launcher: keeps each job's overrides, runs nothing."""

    def __init__(self) -> None:
        self.jobs: list[list[str]] = []

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
        self.jobs += [list(j) for j in job_overrides]
        return [JobReturn(overrides=list(j), status=JobStatus.COMPLETED, _return_value=None) for j in job_overrides]


def expand(overrides: Sequence[str] | None = None) -> list[list[str]]:
    """The per-job override lists a multirun with ``overrides`` launches, in launch order."""
    return _memo("expand", tuple(overrides or []), lambda: _expand(overrides))


def _expand(overrides: Sequence[str] | None) -> list[list[str]]:
    recorder = _Recorder()
    with tempfile.TemporaryDirectory(prefix="kamera-sweep-") as tmp:
        try:
            with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
                hydra = GlobalHydra.instance().hydra
                cfg = hydra.compose_config("config", [*(overrides or []), f"hydra.sweep.dir={tmp}"],
                                           run_mode=RunMode.MULTIRUN, with_log_configuration=False)
                context = HydraContext(config_loader=hydra.config_loader, callbacks=None)  # type: ignore[arg-type]
                sweeper = Plugins.instance().instantiate_sweeper(config=cfg, hydra_context=context,
                                                                 task_function=lambda _: None)
                sweeper.launcher = recorder  # type: ignore[attr-defined]
                sweeper.validate_batch_is_legal = lambda batch: None  # type: ignore[method-assign]  # done below
                sweeper.sweep(arguments=OmegaConf.to_container(cfg.hydra.overrides.task, resolve=False))
        except HydraException as err:
            raise SweepError(str(err)) from None
    for job in recorder.jobs:  # Hydra's check that every job composes (Sweeper.validate_batch_is_legal), made through
        compose_config(job)  # the memo: status, --check and the cost estimate then compose each job once, not twice
    return recorder.jobs


def composed(overrides: Sequence[str] | None = None) -> list[tuple[list[str], DictConfig]]:
    """Every job of the sweep ``overrides`` describes, as (its overrides, its composed config), in launch order:
    the one loop over a sweep that status, the cost estimate, the rehearsal and ``--check`` share."""
    return [(job, compose_config(job)) for job in expand(overrides)]


def launcher_problems(overrides: Sequence[str] | None = None) -> list[str]:
    """Why the sweep's launcher cannot submit from this machine, one line (empty when it can): a Slurm launcher
    (``launcher=slurm_h100``, ``make … LAUNCHER=slurm``) needs ``sbatch`` on PATH, which a machine off a cluster
    lacks (submitit would fail there with a traceback once every job is composed)."""
    target = str(OmegaConf.select(compose_config(overrides, hydra_config=True), "hydra.launcher._target_") or "")
    if target.endswith("SlurmLauncher") and shutil.which("sbatch") is None:
        return ["launcher: a Slurm launcher needs sbatch, which is not on PATH here (not a Slurm submit host); "
                "run it from the cluster's login node, or use LAUNCHER=local / launcher=local (in-process) or "
                "submitit_local"]
    return []


def paper_experiments() -> list[str]:
    """Experiment configs that run paper models: every conf/experiment file not ending in ``_tiny``."""
    return sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml") if not p.stem.endswith("_tiny"))


def manifest_line(job: Sequence[str]) -> str:
    """One job's overrides as a shell-quoted line (``eval "set -- $LINE"`` gives the arguments back)."""
    return shlex.join(job)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Expand or preflight a kamera sweep.")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="preflight every job (models, data, arms, values)")
    mode.add_argument("--manifest", action="store_true", help="print one shell-quoted override line per job")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    try:
        jobs = expand(args.overrides)
    except SweepError as err:
        print(f"cannot expand the sweep: {err}", file=sys.stderr)
        return 1
    if args.manifest:
        for job in jobs:
            print(manifest_line(job))
        return 0
    # one job's overrides (a sweep's `choice(…)` composes only under --multirun; the launcher is the same for all)
    problems: dict[str, list[str]] = {p: ["every job"] for p in launcher_problems(jobs[0] if jobs else args.overrides)}
    for job, cfg in composed(args.overrides):
        for p in added_keys_that_exist(job) + preflight(cfg):
            problems.setdefault(p, []).append(" ".join(job))
    if not problems:
        print(f"preflight ok: {len(jobs)} job(s)")
        return 0
    print(f"preflight failed: {len(problems)} problem(s) across {len(jobs)} job(s)", file=sys.stderr)
    for p, where in problems.items():
        print(f"- {p}\n    (jobs: {'; '.join(where[:3])}{' …' if len(where) > 3 else ''})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
