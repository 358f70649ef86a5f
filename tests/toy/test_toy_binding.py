"""The shipped toy binding model shows the paper's effect through the harness API, on CPU.

Gates (issue): re-prefill two-hop ≥ 0.95; blind ≤ chance + 0.1; rank-8 patch ≥ 0.95; controls unaffected
by blind reuse (accuracy and KL); full-rank patch KL ≤ 1e-6 · KL_blind. The slow test retrains from the
committed config and must meet the same gates.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from kamera.items.spans import Span, validate_spans
from kamera.models import load_model, place
from kamera.models.qwen_vl import QwenVLAdapter
from kamera.models.text import TextAdapter
from kamera.toy import render
from kamera.toy.evaluate import KindReport, evaluate_kind
from kamera.toy.items import items
from kamera.toy.model import DEFAULT_VARIANT, WEIGHTS, WordTokenizer, build, image_processor, load
from kamera.toy.task import KINDS, VARIANTS, TaskSpec, World
from kamera.toy.train import Sampler, hidden, main, sequence_words

# one worker runs this module: its module-scoped fixtures are built once, not once per xdist worker
pytestmark = pytest.mark.xdist_group("toy-binding")

# Held-out items per kind: the gate (make test) checks the shipped weights on a seeded subset (~2 s a variant; a
# patch that restores nothing still fails it: blind two-hop is at chance there); make test-full and the retrain
# check at full N (~8 s a variant).
N_GATE = {"two_hop": 48, "control": 24, "control_b": 24}
N = {"two_hop": 200, "control": 100, "control_b": 100}
CONTROL_BLIND_KL = 1e-3  # mean KL(re-prefill ‖ blind) a control may show


@pytest.fixture(scope="module", params=[pytest.param((variant, n), id=f"{variant}-{size}",
                                                     marks=[pytest.mark.full] if size == "full" else [])
                                        for variant in VARIANTS for size, n in (("gate", N_GATE), ("full", N))])
def reports(request) -> dict[str, KindReport]:
    """Every query kind on the shipped weights of one variant, through ReuseContext (re-prefill, blind, r8, full)."""
    torch.set_num_threads(1)
    variant, n = request.param
    adapter = load(variant=variant)
    return {kind: evaluate_kind(adapter, kind, n[kind], ranks=(8,)) for kind in KINDS}


def check_gates(reports: dict[str, KindReport]) -> None:
    """The issue's gates on one model's reports."""
    two = reports["two_hop"]
    assert two.row("reprefill").accuracy >= 0.95
    assert two.row("blind").accuracy <= two.chance + 0.1
    assert two.row("patch_r8").accuracy >= 0.95
    assert two.row("patch_full").kl_mean <= 1e-6 * two.row("blind").kl_mean
    for kind in ("control", "control_b"):
        rep = reports[kind]
        assert rep.row("reprefill").accuracy >= 0.95, kind
        assert rep.row("blind").accuracy >= rep.row("reprefill").accuracy - 0.01, kind
        assert rep.row("blind").kl_mean <= CONTROL_BLIND_KL, kind


def test_shipped_weights_meet_the_gates(reports):
    check_gates(reports)


def test_the_deficit_sits_in_layer_1_only(reports):
    """Layer 0 sees only embeddings and positions, so relocation leaves nothing to patch there."""
    layer0, layer1 = reports["two_hop"].deficit_by_layer
    assert max(layer0.values()) <= 1e-6
    assert min(layer1.values()) >= 1e-2
    assert reports["two_hop"].n_b > 32  # ranks up to 32 are real truncations, not clamped


def test_registry_loads_the_toy_model():
    adapter = load_model("toy_binding")
    assert adapter.name == "toy_binding" and adapter.n_layers == 2 and adapter.variant == DEFAULT_VARIANT
    item = items(adapter.task, "two_hop", 1, variant=adapter.variant)[0]
    ids = [adapter.tokenize(c)[0] for c in item.choices]
    assert adapter.decode(ids) == " ".join(item.choices)


@pytest.mark.parametrize("variant", VARIANTS)
def test_shipped_files_record_how_they_were_made(variant):
    record = json.loads((WEIGHTS / variant / "train.json").read_text())
    assert record["command"].startswith("python -m kamera.toy.train") and record["args"]["variant"] == variant
    assert record["steps_done"] == record["args"]["steps"]
    assert sum(f.stat().st_size for f in (WEIGHTS / variant).iterdir()) < 4e6


# ----- the task and tokenizer --------------------------------------------------------------------
def test_items_are_seeded_and_answers_follow_the_world():
    spec = TaskSpec()
    for kind in KINDS:
        a, b = items(spec, kind, 20, seed=3), items(spec, kind, 20, seed=3)
        assert a == b and a != items(spec, kind, 20, seed=4)
        for it in a:
            validate_spans(it.spans())
            w = it.world
            if kind == "control":
                assert it.answer == w.colour_of[it.argument]
            elif kind == "two_hop":
                assert it.answer == w.colour_of[w.object_at[it.argument]]
            else:
                assert it.answer == w.object_at[it.argument]
            assert it.choices[it.gold] == it.answer
    assert sorted(o for o, _ in a[0].world.a) == sorted(o for _, o in a[0].world.b)


@pytest.mark.parametrize("variant", VARIANTS)
def test_training_encodes_an_item_exactly_as_the_harness_does(variant):
    """Training packs queries after B; one packed query is, token for token and pixel for pixel, a harness
    item, and the batched training forward gives the adapter's re-prefill logits."""
    spec = TaskSpec()
    model, tok = build(spec, variant)
    adapter = (TextAdapter(model, tok) if variant == "text" else QwenVLAdapter(model, tok, image_processor()))
    sampler = Sampler(spec, tok, variant)
    it = items(spec, "two_hop", 1, variant=variant)[0]
    enc = adapter.encode(it.spans())
    batch = sampler.encode([it.world], [[(it.kind, it.argument, it.answer)]])
    assert torch.equal(torch.cat([s.input_ids for s in enc.spans]), batch.ids[0, :-1])
    target = it.world.object_at[it.argument] if variant == "text" else "<image>"  # the answer's B object token
    assert batch.ids[0, batch.target_pos[0, 0]] == tok.ids[target]
    if variant == "image":
        pix = [adapter._pixels(span.parts[1]) for span in it.spans()[1:3]]
        assert torch.equal(torch.cat([p["pixel_values"] for p in pix]), batch.pixel_values)
        assert torch.equal(torch.cat([p["image_grid_thw"] for p in pix]), batch.grid_thw)
    with torch.no_grad():
        last, _, _ = hidden(model.eval(), batch)
        torch.testing.assert_close(model.lm_head(last[0, -2]), adapter.forward(place(enc.spans)).logits,
                                   rtol=0, atol=1e-5)


def test_image_cells_are_encoded_independently():
    """The vision window is one cell: changing one cell of B changes that visual token only (no shortcut that
    would put a location and its object in one token before the language model)."""
    adapter = load(variant="image")
    world = items(adapter.task, "two_hop", 1, variant="image")[0].world
    cells = render.b_cells(world)
    changed = [*cells[:5], render.BLANK, *cells[6:]]
    a, b = (adapter.encode_span(Span("B", ("B:", render.grid(c, 2 * render.PAIRS_PER_ROW)))) for c in (cells, changed))
    differs = (a.embeds - b.embeds).abs().amax(-1) > 0
    assert differs.nonzero().flatten().tolist() == [1 + 1 + 5]  # "B:", <vision_start>, then cell 5


def test_batches_follow_the_layout():
    spec = TaskSpec()
    tok = WordTokenizer(spec.vocab())
    batch = Sampler(spec, tok, "text").sample(np.random.default_rng(0), 4, 6, k=5)
    rows = torch.arange(4)[:, None]
    words = [[tok.vocab[i] for i in row] for row in batch.ids[rows, batch.object_pos].tolist()]
    assert all(w in spec.objects for row in words for w in row)
    prev = batch.ids[rows, batch.object_pos - 1]
    assert torch.equal(prev, batch.object_prev)
    b_only = Sampler(spec, tok, "text").sample(np.random.default_rng(0), 2, 3, k=5, with_a=False)
    assert b_only.object_colour is None and tok.ids["A:"] not in b_only.ids


def test_bad_input_is_refused():
    tok = WordTokenizer(TaskSpec().vocab())
    with pytest.raises(ValueError, match="not in the toy vocabulary"):
        tok.encode("red_cup unicorn")
    with pytest.raises(ValueError, match="n_entries"):
        TaskSpec(n_entries=30)
    with pytest.raises(ValueError, match="query kind"):
        items(TaskSpec(), "three_hop", 1)
    world = World.sample(TaskSpec(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="only carry control_b"):
        sequence_words(world, [("two_hop", "attic", "red")], with_a=False)
    with pytest.raises(ValueError, match="entries"):
        World.sample(TaskSpec(), np.random.default_rng(0), k=40)
    with pytest.raises(ValueError, match="variant"):
        load(variant="audio")


# ----- retraining --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_retraining_from_the_committed_config_meets_the_gates(tmp_path, variant):
    """Replays the shipped weights' recorded arguments into a fresh directory (~6 min text, ~15 min image)."""
    args = json.loads((WEIGHTS / variant / "train.json").read_text())["args"]
    argv = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if key == "out":
            value = str(tmp_path)
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    main(argv)
    adapter = load(path=tmp_path)
    check_gates({kind: evaluate_kind(adapter, kind, N[kind], ranks=(8,)) for kind in KINDS})
