"""``kamera.sweep`` lists exactly the jobs ``python -m kamera.run -m`` runs (issue 9, failure 8): on main
it re-implemented the expansion, so ``experiment=table3 model=qwen2_5_vl_7b`` listed 4 jobs where
``-m`` runs 2, and manifest lines were split on spaces."""

from __future__ import annotations

import shlex

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from kamera.job import CONF_DIR
from kamera.sweep import compose_config, expand, manifest_line

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
EXTRA = {  # overrides a user adds to a sweep: fixed values, sweeps of their own, values that replace a sweep axis
    "table3": [["model=qwen2_5_vl_7b"], ["n_items=3", "bench=mm_niah_retrieval,mm_niah_counting"]],
    "table3_tiny": [["testbed=tiny_llava,tiny_kimi", "seed=0,1"], ["model=tiny_kimi"]],
    "fig5_tiny": [["arms=[blind, patch_r4]", "paths.results=\"/a b/it's\""]],
}


def multirun(overrides: list[str], tmp_path) -> list[tuple[list[str], dict]]:
    """What Hydra's multirun (basic sweeper and launcher) hands each job: its overrides and its config."""
    seen = []

    def task(cfg) -> None:
        job = OmegaConf.to_container(cfg, resolve=True)
        seen.append((list(HydraConfig.get().overrides.task), job))

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        GlobalHydra.instance().hydra.multirun("config", task, [*overrides, f"hydra.sweep.dir={tmp_path}"],
                                              with_log_configuration=False)
    return seen


# every experiment against Hydra's own multirun is the integration tier (about 70 s on 2 cores); the cases
# with a user's overrides stay in `make test`
CASES = [pytest.param([f"experiment={e}"], marks=pytest.mark.integration) for e in EXPERIMENTS] + [
    [f"experiment={e}", *x] for e, xs in EXTRA.items() for x in xs]


@pytest.mark.parametrize("overrides", CASES, ids=" ".join)
def test_sweep_job_lists_equal_what_hydra_runs(overrides, tmp_path):
    jobs = expand(overrides)
    ran = multirun(overrides, tmp_path)
    assert jobs == [o for o, _ in ran]
    for line, (_, cfg) in zip(jobs, ran, strict=True):  # a manifest line composes to the config the job saw
        args = shlex.split(manifest_line(line))
        assert args == line
        assert OmegaConf.to_container(compose_config(args), resolve=True) == cfg


def test_a_command_line_value_replaces_the_experiments_sweep_axis():
    assert expand(["experiment=table3", "model=qwen2_5_vl_7b"]) == [
        ["model=qwen2_5_vl_7b", "bench=mm_niah_reasoning", "experiment=table3"],
        ["model=qwen2_5_vl_7b", "bench=mm_niah_retrieval", "experiment=table3"],
    ]


def test_a_cached_composition_follows_the_environment_it_is_read_in(monkeypatch):
    """Compositions are memoised without the KAMERA_* environment in their key (kamera.sweep.expand._conf_state):
    exact only because conf/ reads the environment lazily, so a config served from the cache must resolve to
    the environment of the moment it is read, as a fresh composition would."""
    monkeypatch.setenv("KAMERA_MODELS", "/models/a")
    monkeypatch.setenv("KAMERA_RESULTS", "/results/a")
    first = compose_config(["experiment=table3"])
    assert (first.paths.models, first.paths.results) == ("/models/a", "/results/a")
    monkeypatch.setenv("KAMERA_MODELS", "/models/b")
    monkeypatch.delenv("KAMERA_RESULTS")
    again = compose_config(["experiment=table3"])
    assert (again.paths.models, again.paths.results) == ("/models/b", "results/raw")
    assert (first.paths.models, first.paths.results) == ("/models/b", "results/raw")  # read now, resolved now
