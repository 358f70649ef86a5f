"""Cost estimates: FLOPs from the published configs, and the H100-hours each paper experiment states."""

from __future__ import annotations

import pytest
import torch

from kamera.models.cost import ItemShape, experiment_hours, model_flops, published_config
from kamera.shaped.rehearse import paper_experiments
from kamera.sweep import compose_config


@pytest.mark.parametrize("name", ["qwen2_5_vl_7b", "llava_1_5_7b", "qwen3_omni_30b_a3b"])
def test_decoder_flops_are_twice_the_active_weights(name):
    """Counted from the config, 2 × the weights a token passes through (dense: every decoder matrix; MoE: the
    attention, the router and the 8 routed experts of 128), checked against the full model built on meta."""
    from kamera.shaped import shaped_writer
    from kamera.shaped.writer import build_meta

    spec = shaped_writer(name).spec
    model = build_meta(spec, spec.config)
    lm = (model.thinker if name.startswith("qwen3_omni") else model).model.language_model
    weights = sum(p.numel() for n, p in lm.layers.named_parameters() if p.dim() == 2 or "experts" in n)
    f = model_flops(name, spec.config)
    if name.startswith("qwen3_omni"):
        t = spec.config["thinker_config"]["text_config"]
        per_expert = 3 * t["hidden_size"] * t["moe_intermediate_size"]
        weights -= t["num_hidden_layers"] * (t["num_experts"] - t["num_experts_per_tok"]) * per_expert
    assert f.decoder == pytest.approx(2 * weights, rel=0.01)
    del model


def test_an_item_costs_its_forwards():
    f = model_flops("qwen2_5_vl_7b", published_config("qwen2_5_vl_7b"))
    shape = ItemShape(n=1000, n_b=300, image_tokens=0)
    base = f.item(shape, n_arms=4, oracle=False)
    assert f.item(shape, n_arms=4, oracle=True) == pytest.approx(base + f.forward(1000, 500))
    assert f.item(shape, n_arms=5, oracle=False) == pytest.approx(base + f.forward(shape.query, 1000))
    assert f.forward(1000, 500) > 1000 * f.decoder


@pytest.mark.parametrize("experiment", paper_experiments())
def test_every_paper_experiment_states_its_estimated_cost(experiment):
    cfg = compose_config([f"experiment={experiment}"])
    stated = cfg.get("cost")
    assert stated is not None and stated.get("h100_hours") is not None, f"{experiment} states no cost"
    rows, total = experiment_hours([f"experiment={experiment}"])
    assert rows and total > 0
    assert float(stated.h100_hours) == pytest.approx(total, rel=0.1), (experiment, total)
    assert torch.isfinite(torch.tensor(total))
