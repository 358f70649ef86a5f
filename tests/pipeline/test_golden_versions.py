"""Issue 19 item 1, the other half, in the gate (issue 29 item 4): a change to an arm's, probe's or window probe's
numbers without a version bump fails here, seconds after the edit. Every registered plugin runs on one golden
item of the smallest tiny model (:data:`MODEL`: its first synthetic item, a window item for window probes) through
the real runner; the sums of its rows' deterministic numeric columns are compared with ``golden_versions.json``,
recorded with the plugin's ``version`` and the metrics' ``metrics_version``:

- same versions, other numbers: the change needs a version bump (the plugin's ``version``, or
  ``kamera.metrics.VERSION`` for a metric), so stored rows are recomputed instead of passing for new ones;
- other versions: the golden file is older than the bump; rewrite it (``python tests/pipeline/test_golden_versions.py
  --update``) and commit it with the bump.

Timings, memory and run bookkeeping are left out; numbers match to a relative 1e-4. About 9 s on one CPU core
(three jobs of one item on tiny_llava). A change that keeps the numbers (a refactor) passes here; the runner still
warns when stored rows were made by other source at the same version (``source_digest``, :mod:`kamera.run.runner`).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

if __name__ == "__main__":  # run as a script: the pipeline helpers sit beside this file
    sys.path.insert(0, str(Path(__file__).parent))

from pipeline_support import job_config

from kamera.arms import ARMS
from kamera.job.spec import build_specs, conf_labels
from kamera.job.store import shards
from kamera.probes import PROBES
from kamera.run import runner
from kamera.window.probes import PROBES as WINDOW_PROBES

# one worker runs this module: its module-scoped fixtures are built once, not once per xdist worker
pytestmark = pytest.mark.xdist_group("golden-versions")

GOLDEN = Path(__file__).with_name("golden_versions.json")
PREFERRED = {"patch": "patch_r8"}  # a truncated rank says more than patch_full
SKIPPED = {"ttft"}  # measures time, nothing else
MODEL = "tiny_llava"  # the smallest tiny model: every kind's golden item runs on it
JOBS = {  # kind → (overrides of its job, its plugin list's key, the table its records land in)
    "arm": ((f"model={MODEL}", "bench=synthetic"), "arms", "rows"),
    "probe": ((f"model={MODEL}", "bench=synthetic", "arms=[]"), "probes", "probes"),
    "window_probe": ((f"model={MODEL}", "bench=window_synthetic", "arms=[]"), "window_probes", "rows"),
}
NOT_NUMBERS = ("second", "bytes_held", "context_bytes", "peak", "run_index", "version", "time", "_ms")


def labels(kind: str) -> list[str]:
    """One conf label per registered plugin name of ``kind`` (its first, or :data:`PREFERRED`)."""
    chosen: dict[str, str] = {}
    for label in conf_labels(kind):
        name = build_specs(kind, [label])[0].plugin.name
        if name not in SKIPPED and (name not in chosen or PREFERRED.get(name) == label):
            chosen[name] = label
    return sorted(chosen.values())


def summary(frame: pd.DataFrame) -> dict:
    """Rows, and the sum of each deterministic numeric column (NaNs skipped) of one plugin's records."""
    out: dict[str, float] = {"records": float(len(frame))}
    for col in sorted(frame.columns):
        if any(t in col for t in NOT_NUMBERS) or not pd.api.types.is_numeric_dtype(frame[col]):
            continue
        values = frame[col].astype(float)
        finite = values[values.notna() & (values.abs() != math.inf)]
        if len(finite):  # a column of another plugin's records (all NaN here) is not this plugin's
            out[col] = float(finite.sum())
    return out


def measure(tmp: Path) -> dict:
    """{kind: {label: {"version", "metrics_version", "values" | "refused"}}} on the golden items."""
    golden: dict[str, dict] = {}
    for kind, (overrides, key, table) in JOBS.items():
        chosen = labels(kind)
        specs = {s.label: s for s in build_specs(kind, chosen)}
        runner.run(job_config(tmp / kind, *overrides, f"{key}=[{','.join(chosen)}]", "n_items=1"))
        (shard,) = shards(tmp / kind / "raw", "adhoc")
        frame, column = shard.table(table), "arm" if table == "rows" else "probe"
        refused = {r["arm"]: r["reason"] for r in shard.meta().get("refusals", [])}
        golden[kind] = {}
        for label, spec in specs.items():
            version, metrics_version = spec.stamp
            entry = {"version": version, "metrics_version": metrics_version}
            mine = frame[frame[column] == label] if len(frame) else frame
            entry.update({"values": summary(mine)} if len(mine) else {"refused": refused.get(label, "no records")})
            golden[kind][label] = entry
    return golden


def differs(a: dict, b: dict) -> list[str]:
    """The measures of two summaries that disagree beyond a relative 1e-4."""
    keys = sorted(set(a) | set(b))
    return [k for k in keys if k not in a or k not in b or not math.isclose(a[k], b[k], rel_tol=1e-4, abs_tol=1e-15)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    return measure(tmp_path_factory.mktemp("golden"))


def test_every_registered_plugin_has_a_golden_entry(measured):
    golden = json.loads(GOLDEN.read_text())
    registries = {"arm": ARMS, "probe": PROBES, "window_probe": WINDOW_PROBES}
    for kind, registry in registries.items():
        names = {build_specs(kind, [label])[0].plugin.name for label in golden[kind]}
        assert set(registry) - SKIPPED <= names, f"{kind}s without a golden entry: {set(registry) - SKIPPED - names}"


@pytest.mark.parametrize("kind", list(JOBS))
def test_a_plugins_numbers_change_only_with_its_version(kind, measured):
    golden = json.loads(GOLDEN.read_text())[kind]
    problems = []
    for label, now in measured[kind].items():
        was = golden.get(label)
        if was is None:
            problems.append(f"{label}: not in {GOLDEN.name}; rewrite it (--update)")
            continue
        stamp = (now["version"], now["metrics_version"])
        if stamp != (was["version"], was["metrics_version"]):
            problems.append(f"{label}: {GOLDEN.name} holds version {was['version']} metrics_version "
                            f"{was['metrics_version']}, the code is at {stamp[0]} / {stamp[1]}: rewrite it (--update)")
        elif ("refused" in now) != ("refused" in was):
            problems.append(f"{label}: now {'refused' if 'refused' in now else 'served'} on the golden item, before "
                            f"{'refused' if 'refused' in was else 'served'}, at the same version: bump its version")
        elif "values" in now and (bad := differs(now["values"], was["values"])):
            problems.append(f"{label}: {bad} changed at the same version {stamp[0]} (metrics {stamp[1]}): bump the "
                            f"{kind}'s version (or kamera.metrics.VERSION for a metric), then rewrite {GOLDEN.name}")
    assert not problems, "\n".join(problems)


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--update"]:
        raise SystemExit(f"usage: python {Path(__file__).relative_to(Path.cwd())} --update   # rewrite {GOLDEN.name}")
    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(measure(Path(tmp)), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
