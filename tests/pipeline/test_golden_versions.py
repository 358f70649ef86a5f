"""Issue 19 item 1, the other half, in the gate (issue 29 item 4): a change to an arm's, probe's or window probe's
numbers without a version bump fails here, seconds after the edit. Every registered plugin runs on one golden
item of the smallest tiny model (:data:`MODEL`: its first synthetic item, a window item for window probes) through
the real runner, in float64 (:data:`DTYPE`); the sums of its rows' deterministic numeric columns are compared with
``golden_versions.json``, recorded with the plugin's ``version`` and the metrics' ``metrics_version``:

- same versions, other numbers: the change needs a version bump (the plugin's ``version``, or
  ``kamera.metrics.VERSION`` for a metric), so stored rows are recomputed instead of passing for new ones;
- other versions: the golden file is older than the bump; rewrite it (``python tests/pipeline/test_golden_versions.py
  --update``) and commit it with the bump.

The comparison (:func:`differs`, docs/testing.md "Golden numbers"): counts, ranks, bytes, token positions, choices
and refusals are equal or the check fails; a float measure (:data:`MEASURES`: KL, η and the other ratios and norms)
may move by a relative 1e-7 plus the float64 floor of its kind. The item runs in float64 so that bound is honest on
every CPU: in float32 the same sums moved by up to a relative 0.4 (a KL of 5e-15 at the float32 floor) and 2e-4 (a
KL of 1e-8) between torch's ``default``, ``avx2`` and ``avx512`` kernels; in float64 by at most 2.3e-9 relative /
8.9e-16 absolute on a KL and 2.3e-12 on an η. Timings, memory and run bookkeeping are left out. About 12 s on one
CPU core (three jobs of one item on tiny_llava). A change that keeps the numbers (a refactor) passes here; the runner
still warns when stored rows were made by other source at the same version (``source_digest``,
:mod:`kamera.run.runner`).
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
DTYPE = "float64"  # its float measures then move by ~1e-15 across CPU kernels, not by float32's 1e-4 (docstring)
JOBS = {  # kind → (overrides of its job, its plugin list's key, the table its records land in)
    "arm": ((f"model={MODEL}", f"model.dtype={DTYPE}", "bench=synthetic"), "arms", "rows"),
    "probe": ((f"model={MODEL}", f"model.dtype={DTYPE}", "bench=synthetic", "arms=[]"), "probes", "probes"),
    "window_probe": ((f"model={MODEL}", f"model.dtype={DTYPE}", "bench=window_synthetic", "arms=[]"),
                     "window_probes", "rows"),
}
NOT_NUMBERS = ("second", "bytes_held", "context_bytes", "peak", "run_index", "version", "time", "_ms")
# The float measures (a column whose name holds one of these) and the absolute float64 floor of each kind; every
# other column (counts, ranks, bytes, positions, choices, flags, knob settings) is exact. docs/testing.md derives
# them: a KL is a float64 sum over the vocabulary of p·(log p − log q), |error| ≤ ~4u·log V ≈ 1e-14 with the
# forwards' own error entering squared (u = 2⁻⁵³ ≈ 1.1e-16), so 1e-13; a ratio with a KL below it (η = 1 − KL /
# KL_blind, KL_blind above ETA_FLOOR = 1e-4) inherits 1e-13 / 1e-4 = 1e-9, and so do the other normalised measures.
MEASURES = {"kl": 1e-13, "divergence": 1e-13, "eta": 1e-9, "energy": 1e-9, "norm": 1e-9, "rel": 1e-9,
            "deficit": 1e-9, "explained": 1e-9, "fraction": 1e-9, "ratio": 1e-9, "raw": 1e-9, "residual": 1e-9,
            "value": 1e-9}
REL = 1e-7  # on top of the floor: 40x the largest relative move measured across kernels (2.3e-9, docstring)


def labels(kind: str) -> list[str]:
    """One conf label per registered plugin name of ``kind`` (its first, or :data:`PREFERRED`)."""
    chosen: dict[str, str] = {}
    for label in conf_labels(kind):
        name = build_specs(kind, [label])[0].plugin.name
        if name not in SKIPPED and (name not in chosen or PREFERRED.get(name) == label):
            chosen[name] = label
    return sorted(chosen.values())


def measured_records(frame: pd.DataFrame) -> pd.DataFrame:
    """The records that measure something: a probe's records of a layer-channel it flags below rounding
    (``above_rounding`` 0, :func:`kamera.metrics.above_rounding`: Δ there is the forwards' own rounding) go, for
    their values are ratios of rounding errors (an energy captured there moved by 0.07 between MKL's kernel paths);
    the flag records themselves stay and compare exactly."""
    if "quantity" not in frame.columns or not (flag := frame["quantity"] == "above_rounding").any():
        return frame
    keys = ["layer", "channel"]
    noise = frame[flag & (frame["value"] == 0)][keys].drop_duplicates()
    at = frame.merge(noise.assign(_noise=True), on=keys, how="left")["_noise"].fillna(False).to_numpy(dtype=bool)
    return frame[~at | flag.to_numpy()]


def summary(frame: pd.DataFrame) -> dict:
    """Rows, and the sum of each deterministic numeric column (NaNs skipped) of one plugin's
    :func:`measured_records`."""
    frame = measured_records(frame)
    out: dict[str, float] = {"records": float(len(frame))}
    for col in sorted(frame.columns):
        if any(t in col for t in NOT_NUMBERS) or not pd.api.types.is_numeric_dtype(frame[col]):
            continue
        values = frame[col].astype(float)
        finite = values[values.notna() & (values.abs() != math.inf)]
        if len(finite):  # a column of another plugin's records (all NaN here) is not this plugin's
            out[col] = float(finite.sum())
    return out


def measure(tmp: Path, only: dict[str, list[str]] | None = None) -> dict:
    """{kind: {label: {"version", "metrics_version", "values" | "refused"}}} on the golden items (``only``: these
    kinds and labels, for a targeted check)."""
    golden: dict[str, dict] = {}
    for kind, (overrides, key, table) in JOBS.items():
        if only is not None and kind not in only:
            continue
        chosen = labels(kind) if only is None else only[kind]
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


def floor(column: str) -> float | None:
    """The absolute float64 floor of a float measure (:data:`MEASURES`), None for an exact column."""
    return next((tol for part, tol in MEASURES.items() if part in column), None)


def differs(a: dict, b: dict) -> list[str]:
    """The columns of two summaries that disagree: an exact column by any amount, a measure beyond
    :data:`REL` of its size plus its :func:`floor`."""
    def same(k: str) -> bool:
        tol = floor(k)
        return a[k] == b[k] if tol is None else math.isclose(a[k], b[k], rel_tol=REL, abs_tol=tol)

    return [k for k in sorted(set(a) | set(b)) if k not in a or k not in b or not same(k)]


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


def test_counts_compare_exactly_and_measures_to_their_float64_floor():
    """The rule itself, on every golden entry: a count off by one, and a measure moved by twice its bound (a
    relative 1e-7 plus its floor), are changes; a measure moved by a tenth of its bound is not."""
    golden = json.loads(GOLDEN.read_text())
    values = [e["values"] for kind in golden.values() for e in kind.values() if "values" in e]
    columns = {k for v in values for k in v}
    assert {floor(c) is None for c in columns} == {True, False}  # both kinds occur
    for v in values:
        for col, x in v.items():
            tol = floor(col)
            if tol is None:
                assert differs({**v, col: x + 1}, v) == [col], col
                continue
            bound = REL * abs(x) + tol
            assert differs({**v, col: x + 2 * bound}, v) == [col], col
            assert differs({**v, col: x - bound / 10}, v) == [], col
    assert floor("kl_blind") == floor("kl") == 1e-13 and floor("eta_keep") == 1e-9
    assert floor("n_b") is None and floor("bytes_frac") is None and floor("recomputed_tokens") is None


def test_an_arm_returning_other_numbers_at_its_version_fails(tmp_path, monkeypatch):
    """The mutation the check exists for, through the runner: patch_r8's factors scaled by 1 + 1e-5 (a change far
    below float32's resolution of this item) at the same version is reported, with the measures it moved."""
    import kamera.core.patch as patch_module

    svd = patch_module._svd

    def scaled(matrix, heads, dtype):
        f = svd(matrix, heads, dtype)
        return patch_module.Factors(f.us * (1 + 1e-5), f.s, f.vt, f.heads)

    monkeypatch.setattr(patch_module, "_svd", scaled)
    now = measure(tmp_path, {"arm": ["patch_r8"]})["arm"]["patch_r8"]["values"]
    was = json.loads(GOLDEN.read_text())["arm"]["patch_r8"]["values"]
    assert "kl" in differs(now, was)
    assert set(differs(now, was)) <= {c for c in was if floor(c) is not None}  # no count moved


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--update"]:
        raise SystemExit(f"usage: python {Path(__file__).relative_to(Path.cwd())} --update   # rewrite {GOLDEN.name}")
    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(measure(Path(tmp)), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
