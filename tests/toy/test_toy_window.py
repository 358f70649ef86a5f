"""The shipped toy window model shows the paper's eviction asymmetry (Table 1) through the window probes, on CPU.

Gates (issue 13): the re-prefill answers every recall window; a stale patch decays with turnover (η
falls monotonically, is negative at full turnover, recovers no flip there) while a fresh rank-32
patch holds (η ≥ 0.95 at every τ, recovers the flips); a survivor kept as-is stays near-lossless.
The slow test retrains from the committed config and must meet the same gates.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from experiments.windows import mean, select, table1, turnover_curve
from kamera.job.shapes import shape_of
from kamera.models import load_model
from kamera.sweep.expand import compose_config
from kamera.toy.model import WEIGHTS, load
from kamera.toy.task import TaskSpec
from kamera.toy.train import WindowSampler, main
from kamera.toy.window_task import KINDS, WindowSpec, answer, window_items
from kamera.window import Layout, WindowContext

N = 32  # items per probe in the gates (~15 s)


def gate_rows(adapter) -> list[dict]:
    """The recall and survivor rows of ``adapter`` on N items of their streams, each item through the runner's own
    per-item step (the window job's ``evaluate_item``; the retrain's weights are not a registered model, so the
    runner itself cannot load them)."""
    cfg = compose_config(["testbed=toy_window", "arms=[]", "window_probes=[recall,survivor]",
                          "bench.subset='recall,survivor'", f"n_items={N}"])
    shape = shape_of(cfg)
    probes, _ = shape.specs(cfg)
    rows = []
    for entry in shape.select(cfg, N).items:
        got, _, refused = shape.evaluate_item(adapter, entry, probes, [], cfg, {"model": adapter.name})
        assert len(refused) == 1, refused  # each stream serves its own probe, the other refuses it
        rows += got
    return rows


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    torch.set_num_threads(1)
    return gate_rows(load_model("toy_window"))


def check_gates(rows: list[dict], model: str = "toy_window") -> None:
    curve = turnover_curve(rows, model)
    assert [c["tau"] for c in curve] == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert all(c["reprefill_correct"] >= 0.95 for c in curve)
    stale = [c["stale_eta"] for c in curve]
    assert stale[0] >= 0.99 and all(a > b for a, b in itertools.pairwise(stale)) and stale[-1] < 0
    assert all(c["fresh_eta"] >= 0.95 for c in curve)
    t1 = table1(rows, model)
    flips = t1.flip_recovers
    assert t1.n_flips >= N // 2 and flips["stale"] <= 0.1 and flips["exact"] >= 0.95
    # the patch stored at eviction was formed before the new window existed: it recovers what the stale one does,
    # and nothing is run for it at the recall (the exact one pays its forward there)
    assert flips["stored"] == flips["stale"] and t1.recall_forwards == {"stale": 0, "stored": 0, "exact": 1}
    keep = select(rows, probe="survivor", variant="keep_as_is")
    assert t1.keep_kl <= 1e-4 and t1.keep_kl_over_blind <= 1e-3
    assert mean(r["correct"] for r in keep) == mean(
        r["correct"] for r in select(rows, probe="survivor", variant="reprefill")
    )


def test_shipped_weights_meet_the_gates(rows):
    check_gates(rows)


def test_the_fresh_patch_is_a_real_truncation(rows):
    fresh = select(rows, probe="recall", variant="fresh_exact")
    assert all(r["effective_rank"] == 32 < r["n_b"] for r in fresh)


def test_registry_loads_the_toy_window_model():
    adapter = load_model("toy_window")
    assert adapter.name == "toy_window" and adapter.n_layers == 2 and adapter.variant == "window"
    assert isinstance(adapter.task, WindowSpec)


def test_shipped_files_record_how_they_were_made():
    record = json.loads((WEIGHTS / "window" / "train.json").read_text())
    assert record["command"].startswith("python -m kamera.toy.train") and record["args"]["variant"] == "window"
    assert record["steps_done"] == record["args"]["steps"] and record["args"]["threads"] == 1
    assert record["train_seconds"] <= 20 * 60
    assert sum(f.stat().st_size for f in (WEIGHTS / "window").iterdir()) < 4e6


# ----- the task --------------------------------------------------------------------------------------
def test_window_items_are_seeded_and_answers_follow_the_window():
    spec = WindowSpec()
    for kind in KINDS:
        a = window_items(spec, kind, 5, seed=3)
        assert [i.item_id for i in a] == [i.item_id for i in window_items(spec, kind, 5, seed=3)]
        assert [i.query for i in a] == [i.query for i in window_items(spec, kind, 5, seed=3)]
        assert [i.query for i in a] != [i.query for i in window_items(spec, kind, 5, seed=4)]
    k = spec.window
    for it in window_items(spec, "recall", 20):
        old, x, new = tuple(range(k)), k, tuple(range(k + 1, 2 * k + 1))
        before, after = it.answer((*old, x)), it.answer((*new, x))
        assert before is not None and after is not None and before != after  # the re-binding changed the colour
        assert it.answer((x,)) is None and it.answer(old) is None  # nothing bound / no scene
    it = window_items(spec, "survivor", 1)[0]
    assert it.answer(tuple(range(k))) == it.answer(tuple(range(1, k + 1)))  # the evicted chunk binds nothing asked


def test_answer_takes_the_last_binding_in_front_of_the_scene():
    spec = WindowSpec()
    it = window_items(spec, "divergent", 1, n_states=2)[0]
    chunks = it.chunks
    assert answer(chunks, it.meta["location"], (0, 1, 2)) != answer(chunks, it.meta["location"], (3, 4, 2))


def test_training_encodes_a_window_exactly_as_the_harness_does():
    """One training row of the recall layout is, token for token, the window the probes prefill."""
    adapter = load_model("toy_window")
    spec = adapter.task
    it = window_items(spec, "recall", 1)[0]
    k = spec.window
    view = WindowContext(adapter, it).view(Layout(tuple(range(k)), k))
    harness = torch.cat([s.input_ids for s in view.enc.spans])
    states = [list(it.history[i].meta["colour_of"].items()) for i in range(k)]
    pairs = list(it.history[k].meta["object_at"].items())
    loc = it.meta["location"]
    batch = WindowSampler(spec, adapter.tokenizer).encode(
        [(states, pairs, [], [("two_hop", loc, it.answer(view.layout.window))])]
    )
    assert torch.equal(batch.ids[0, :-1], harness)
    assert int(batch.target_pos[0, 0]) == int(batch.object_pos[0, [p for p, _ in pairs].index(loc)])


def test_window_batches_follow_the_layout():
    spec = WindowSpec()
    adapter = load(variant="window")
    sampler = WindowSampler(spec, adapter.tokenizer)
    batch = sampler.sample(np.random.default_rng(0), 3, 6, 24, layout=(2, 1, 5))
    tok = adapter.tokenizer
    words = [[tok.vocab[i] for i in row] for row in batch.ids.tolist()]
    assert all(w.count("A:") == 3 and w.count("B:") == 1 for w in words)
    assert all(tok.vocab[i] in spec.objects for i in batch.ids[0, batch.object_pos[0]].tolist())
    b_only = sampler.sample(np.random.default_rng(0), 2, 3, 8, with_a=False)
    assert b_only.object_colour is None and tok.ids["A:"] not in b_only.ids


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="per_state"):
        WindowSpec(per_state=5)
    with pytest.raises(ValueError, match="window of 7 states"):
        WindowSpec(window=7)
    with pytest.raises(ValueError, match="kind"):
        window_items(WindowSpec(), "slide", 1)
    with pytest.raises(ValueError, match="n_states"):
        window_items(WindowSpec(), "reorder", 1, n_states=7)
    with pytest.raises(ValueError, match="survivor stream"):
        window_items(WindowSpec(window=3), "survivor", 1)
    assert not isinstance(TaskSpec(), WindowSpec)


# ----- retraining --------------------------------------------------------------------------------
@pytest.mark.slow
def test_retraining_from_the_committed_config_meets_the_gates(tmp_path):
    """Replays the shipped weights' recorded arguments into a fresh directory (~12 min on one thread)."""
    args = json.loads((WEIGHTS / "window" / "train.json").read_text())["args"]
    argv = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if key == "out":
            value = str(tmp_path)
        if value is None:
            continue
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    main(argv)
    check_gates(gate_rows(load(path=tmp_path, variant="window")))
