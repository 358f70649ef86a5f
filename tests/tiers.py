"""Marks that place tests on pytest-xdist workers (``make test`` runs ``-n 2 --dist loadgroup``; docs/testing.md)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def per_experiment(names: Iterable[str]) -> list:
    """``names`` as parameters, each in the xdist group of its experiment: kamera.sweep.expand memoises every
    composition per process (Hydra re-parses conf/ each time, ~0.25 s a job), so the tests that compose one
    experiment's jobs (composes and resolves, states its cost, preflights) run on one worker and compose each job
    once between them, while different experiments spread over the workers. Compose with the sweep's own
    overrides (``expand`` / ``compose_config(job)``), not extra per-test ones (``paths.results=<tmp>``), or the memo
    cannot serve them."""
    return [pytest.param(name, marks=pytest.mark.xdist_group(f"experiment-{name}")) for name in names]
