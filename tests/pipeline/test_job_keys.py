"""Every experiment's job keys, pinned (tests/pipeline/job_keys.json): a refactor of the job layer, the shapes or
the configs must not move a key, or every stored row of that job would be recomputed, or, worse, a new key could
name old rows. A change that means to move keys rewrites the file (``python tests/pipeline/test_job_keys.py``)
and says why in its commit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tiers import per_experiment

from kamera.job import CONF_DIR, config_key
from kamera.sweep import compose_config, expand

KEYS = Path(__file__).with_name("job_keys.json")
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def keys_of(experiment: str) -> dict[str, str]:
    """Each job of the experiment (its overrides, joined) → its config key."""
    return {" ".join(job): config_key(compose_config(job)) for job in expand([f"experiment={experiment}"])}


def test_every_experiment_is_pinned():
    assert sorted(json.loads(KEYS.read_text())) == EXPERIMENTS


@pytest.mark.parametrize("experiment", per_experiment(EXPERIMENTS))
def test_no_job_key_moves(experiment):
    assert keys_of(experiment) == json.loads(KEYS.read_text())[experiment]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[1]))
    KEYS.write_text(json.dumps({e: keys_of(e) for e in EXPERIMENTS}, indent=1, sort_keys=True) + "\n")
    print(f"{KEYS}: {len(EXPERIMENTS)} experiments")
