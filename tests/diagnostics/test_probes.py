"""The diagnostic probes: their conf files build, bad knobs fail at build time (so preflight lists them
before any weights load), their records never shadow the keys the store adds, and on real contexts they
reproduce the known structure (Δ = 0 at the toy's layer 0, full-rank energy 1, oracle recall 1)."""

from __future__ import annotations

import pytest
from diag_support import context, toy_contexts

from kamera.job import build_specs, conf_labels
from kamera.probes import PROBES, make_probe

# the keys the runner adds to every probe record (kamera/run/runner.py: _keys and evaluate_item)
STORE_KEYS = {"group", "job_key", "config_key", "model", "family", "attention", "dtype", "bench", "seed", "item_id",
              "subset", "probe", "knobs"}


def test_every_probe_file_builds_and_names_a_registered_probe():
    labels = conf_labels("probe")  # ls conf/probe: the one list of probe labels
    specs = build_specs("probe", labels)
    assert labels and [s.label for s in specs] == labels  # each file builds, under its own name
    assert {s.plugin.name for s in specs} == set(PROBES)  # every registered probe has a file, every file a probe


@pytest.mark.parametrize(("entry", "error"), [
    ({"name": "energy", "ranks": [0, 4]}, "ranks must be ints ≥ 1"),
    ({"name": "energy", "fraction": 1.5}, "fraction must be a number in"),
    ({"name": "deficit_norms", "oracle": "yes"}, "oracle must be true or false"),
    ({"name": "landmarks", "fraction": 0}, "fraction must be a number in"),
    ({"name": "selector_recall", "selectors": "cross_mass"}, "list of names"),
    ({"name": "selector_recall", "selectors": ["cross_mass", "psychic"]}, r"unknown selector\(s\) \['psychic'\]"),
    ({"name": "selector_recall", "draws": 0}, "draws must be a positive int"),
    ({"name": "video_signals", "cell_px": 2}, "cell_px must be an int ≥ 4"),
    ({"name": "depth_planes", "basis": "feature"}, "basis must be one of"),
    ({"name": "depth_planes", "tokens": 0}, "bins must be ints ≥ 1"),
    ({"name": "relocation", "distances": []}, "distances is empty"),
    ({"name": "ttft", "device": "gpu"}, "ttft device must be one of"),
    ({"name": "ttft", "sizes": [256, -1]}, "sizes must be ints ≥ 1"),
    ({"name": "ttft", "repeats": 0}, "repeats / frame_px must be ints ≥ 1"),
    ({"name": "energy", "rank": 4}, r"no knob\(s\) \['rank'\]"),
])
def test_bad_knobs_fail_when_the_probe_is_built(entry, error):
    with pytest.raises(ValueError, match=error):
        build_specs("probe", [entry])


def test_records_never_shadow_the_store_keys(tiny):
    ctx = context(tiny, "tiny_qwen2_5_vl")
    knobs = {
        "relocation": {"distances": [1, 100]},
        "ttft": {"sizes": [16], "ranks": [4], "repeats": 1, "frame_px": 112},
    }
    for name in sorted(PROBES):
        records = make_probe(name, **knobs.get(name, {})).run(ctx)
        assert records, name
        assert not set().union(*map(set, records)) & STORE_KEYS, name
        assert len({tuple(sorted(r)) for r in records}) == 1, f"{name}: one key set per probe"


def test_toy_probes_show_no_deficit_at_layer_0_and_full_energy_at_full_rank():
    for ctx in toy_contexts():
        norms = {(r["layer"], r["channel"]): r for r in make_probe("deficit_norms", oracle=True).run(ctx)}
        for ch in ("k", "v"):
            assert norms[(0, ch)]["ratio"] <= 1e-6 and norms[(1, ch)]["ratio"] >= 1e-2
        full = ctx.patch.full_rank
        energy = make_probe("energy", ranks=[1, full, 4 * full]).run(ctx)
        top = [r["value"] for r in energy if r["quantity"] == "energy_captured" and r["rank"] >= full]
        assert top and all(v == 1.0 for v in top)
        assert make_probe("video_signals").run(ctx) == []  # A's and B's pictures differ in token grid


def test_selector_probe_recalls_the_truth_with_the_oracle_and_half_at_random(tiny):
    ctx = context(tiny, "tiny_kimi")
    recall = {r["selector"]: r["value"] for r in make_probe("selector_recall", draws=64).run(ctx)}
    assert recall["oracle"] == 1.0 and abs(recall["random"] - 0.5) < 0.15


def test_ttft_probe_refuses_another_device_than_its_knob(tiny):
    ctx = context(tiny, "tiny_llava")
    with pytest.raises(ValueError, match="set to time on cuda but the job runs on cpu"):
        make_probe("ttft", device="cuda", sizes=[16]).run(ctx)
