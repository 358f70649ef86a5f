"""Shared fixtures: tiny adapters, built once per session (item helpers live in ``tinyfamilies.py``); the tier guard."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from shaped_fixtures import CANARIES, GATE_CANARY

from kamera.models import load_model
from kamera.models.shaped import shaped_models

# one intra-op thread per test process (two xdist workers share two cores); KAMERA_TEST_THREADS=N runs the suite
# with N, to check that no tolerance depends on how a reduction is split across threads (docs/testing.md)
torch.set_num_threads(int(os.environ.get("KAMERA_TEST_THREADS", "1")))

# torch's own limit, not ours: on a CPU with AMX, bf16 attention packs its operands with pack_vnni2, which raises
# under a forced capability below avx512 (ATEN_CPU_CAPABILITY=avx2 / default; seen in the bf16 floor test). A test
# that hits exactly this error under exactly such a capability is skipped with the reason (docs/testing.md).
FORCED_BELOW_AVX512 = os.environ.get("ATEN_CPU_CAPABILITY", "") in ("default", "avx2")
TORCH_CANNOT_PACK = "pack_vnni2 is only supported when avx512 is supported"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    excinfo = call.excinfo
    if FORCED_BELOW_AVX512 and report.failed and excinfo and TORCH_CANNOT_PACK in str(excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: torch cannot run bf16 packing under "
                           f"ATEN_CPU_CAPABILITY={os.environ['ATEN_CPU_CAPABILITY']} on this CPU ({TORCH_CANNOT_PACK})")


@pytest.fixture(scope="session")
def tiny():
    """tiny(name, dtype="float32") → a cached adapter of a tiny random model."""
    cache: dict = {}

    def get(name: str, dtype: str = "float32"):
        if (name, dtype) not in cache:
            cache[(name, dtype)] = load_model(name, dtype=dtype)
        return cache[(name, dtype)]

    return get


SHAPED_FIXTURES = {"shaped_cache", "shaped_root", "shaped", "remote"}  # tests/shaped_fixtures.py, models_remote


def pytest_collection_modifyitems(config, items):
    """Keep the tiers honest (docs/testing.md): a test on shaped checkpoints (GBs each) carries the ``shaped`` mark,
    unless it runs the gate's canary; and a shaped test in CI (``shaped`` without ``full``) runs only the
    canaries (one paper model per family kind, ``tests/shaped_fixtures.py``), so CI does not grow with each new
    paper model."""
    def params(item) -> set:
        return {v for v in getattr(getattr(item, "callspec", None), "params", {}).values() if isinstance(v, str)}

    stray = [item.nodeid for item in items
             if SHAPED_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("shaped") is None
             and GATE_CANARY not in params(item)]
    if stray:
        raise pytest.UsageError("tests on shaped checkpoints must be marked @pytest.mark.shaped (only the "
                                f"{GATE_CANARY} canary stays in make test): " + ", ".join(stray))
    models = set(shaped_models())
    beyond = [item.nodeid for item in items if item.get_closest_marker("shaped") and not item.get_closest_marker("full")
              and (params(item) & models) - set(CANARIES.values())]
    if beyond:
        raise pytest.UsageError(
            "shaped tests of a model that is not a canary belong to make test-full: give them "
            "shaped_marks(name) (tests/shaped_fixtures.py) or @pytest.mark.full: " + ", ".join(beyond)
        )
