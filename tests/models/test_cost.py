"""Cost estimates: FLOPs from the published configs, the forwards each job kind runs per item (arms, probes,
window probes), and the H100-hours each paper experiment states."""

from __future__ import annotations

import math

import pytest
from tiers import per_experiment

from kamera.job import build_specs
from kamera.models.flops import (
    Forward,
    ItemShape,
    WindowShape,
    model_flops,
    paper_model_flops,
    published_config,
)
from kamera.reuse.forwards import item_forwards, window_forwards
from kamera.sweep import compose_config, paper_experiments
from kamera.sweep.cost import check, experiment_hours, main

SHAPE = ItemShape(n=1000, n_b=300, image_tokens=0)
WINDOW = WindowShape(chunk=512, window=5, history=11, foreign=4, image_tokens=512)


def plugins(kind: str, *entries) -> list:
    return [s.plugin for s in build_specs(kind, list(entries))]


def flops(forwards: list[Forward]) -> float:
    return paper_model_flops("qwen2_5_vl_7b").forwards(forwards)


@pytest.mark.parametrize("name", ["qwen2_5_vl_7b", "llava_1_5_7b", "qwen3_omni_30b_a3b"])
def test_decoder_flops_are_twice_the_active_weights(name):
    """Counted from the config, 2 × the weights a token passes through (dense: every decoder matrix; MoE: the
    attention, the router and the 8 routed experts of 128), checked against the full model built on meta."""
    from kamera.models.shaped import shaped_writer
    from kamera.models.shaped.writer import build_meta

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


def test_mla_moe_flops_are_twice_the_active_weights():
    """Kimi-VL (MLA, DeepSeek-style MoE: 6 of 64 routed experts and 2 shared, layer 0 dense), from its loader's
    config, against its native decoder built on meta with the 58 unrouted experts per layer taken off."""
    import torch
    import transformers as tf

    config = published_config("kimi_vl_a3b")
    t = config["text_config"]
    with torch.device("meta"):
        lm = tf.AutoModelForCausalLM.from_config(tf.AutoConfig.for_model(**t))
    weights = sum(p.numel() for n, p in lm.model.layers.named_parameters() if p.dim() >= 2 or "experts" in n)
    per_expert = 3 * t["hidden_size"] * t["moe_intermediate_size"]
    weights -= (
        (t["num_hidden_layers"] - t["first_k_dense_replace"])
        * (t["n_routed_experts"] - t["num_experts_per_tok"])
        * per_expert
    )
    assert model_flops("kimi_vl_a3b", config).decoder == pytest.approx(2 * weights, rel=0.01)


def test_an_arm_item_costs_its_shared_forwards_and_one_query_per_arm():
    base = flops(item_forwards(SHAPE, plugins("arm", "blind", "patch_r16"), [], 28))
    more = flops(item_forwards(SHAPE, plugins("arm", "blind", "patch_r16", "patch_r64"), [], 28))
    oracle = flops(item_forwards(SHAPE, plugins("arm", "blind", "patch_r16", "oracle4d"), [], 28))
    assert more == pytest.approx(base + flops([SHAPE.query_over()]))
    assert oracle == pytest.approx(more + flops([SHAPE.full()]))  # the 4D-mask forward, then its own query
    # full prefill, canonical, blind: each once however many arms read them
    assert base == pytest.approx(flops([SHAPE.full(), SHAPE.solo(), SHAPE.query_over(3)]))


def test_a_probe_costs_its_needs_and_its_own_forwards():
    energy = flops(item_forwards(SHAPE, [], plugins("probe", "energy"), 28))
    assert energy == pytest.approx(flops([SHAPE.full(), SHAPE.solo()]))  # the patch needs both prefills, no query
    near = flops(item_forwards(SHAPE, [], plugins("probe", {"relocation": {"distances": [1, 10]}}), 28))
    far = flops(item_forwards(SHAPE, [], plugins("probe", {"relocation": {"distances": [1, 10, 100, 1000]}}), 28))
    assert far - near == pytest.approx(flops([SHAPE.b_alone(2)]))  # one B-alone prefill per distance
    both = flops(item_forwards(SHAPE, [], plugins("probe", "energy", "landmarks"), 28))
    assert both == pytest.approx(energy + flops([SHAPE.b_in_context()]))  # shared prefills counted once
    split = flops(item_forwards(SHAPE, [], plugins("probe", "deficit_split"), 28))
    plain = flops(item_forwards(SHAPE, [], plugins("probe", "deficit_norms"), 28))
    assert split == pytest.approx(plain + flops([SHAPE.full()]))  # deficit_split asks for the oracle forward


def test_injection_depth_costs_its_layer_passes():
    """Σ_ℓ (L − ℓ) / L forwards of B behind the prefix for ℓ = 0 and each measured layer, one replay over A."""
    (probe,) = plugins("probe", "injection_depth")
    replay, passes = probe.cost_forwards(SHAPE, 4)
    assert replay == SHAPE.b_in_context() and passes.count == pytest.approx((4 + 3 + 2 + 1) / 4)
    (deep,) = plugins("probe", {"injection_depth": {"layers": [3]}})
    assert deep.cost_forwards(SHAPE, 4)[1].count == pytest.approx((4 + 1) / 4)


def test_a_window_job_grows_with_its_window_and_its_probes_layouts():
    recall = plugins("window_probe", "recall")
    small, large = (
        flops(window_forwards(WindowShape(chunk=512, window=k, history=2 * k + 1), recall, 28)) for k in (5, 10)
    )
    assert large > small
    # recall at 6 turnovers re-prefills 6 distinct layouts of k + 1 chunks; at τ = 1 only, 2 (eviction time, τ = 1)
    full = window_forwards(WINDOW, recall, 28)
    only = window_forwards(WINDOW, plugins("window_probe", "recall_full_turnover"), 28)
    assert full[0] == WINDOW.layout(6, 6) and only[0] == WINDOW.layout(6, 2)
    assert full[1].count == 6 + 3 * 6 and only[1].count == 1 + 3  # blind + stale, stored and exact fresh per τ
    # reorder's orbit: 3! = 6 layouts of 4 chunks at K = 3, 4! = 24 of 5 at K = 4
    k3, k4 = (window_forwards(WINDOW, plugins("window_probe", p), 28)[0] for p in ("reorder", "reorder_k4"))
    assert (k3.count, k3.tokens, k4.count) == (6, WINDOW.layout(4).tokens, 24)
    assert flops([k4]) > 4 * flops([k3])


def test_refresh_counts_its_partial_re_runs():
    (probe,) = plugins("window_probe", "refresh")
    rows = probe.cost_forwards(WINDOW, 28)[2]
    assert rows == WINDOW.rows(5, 4 * (21 / 28 + 7 / 28))  # four swaps, ⌈0.75·28⌉ and ⌈0.25·28⌉ layers each


def test_every_window_and_item_probe_declares_its_forwards():
    from kamera.probes import PROBES
    from kamera.window.probes import PROBES as WINDOW_PROBES

    lacking = [n for n, cls in [*PROBES.items(), *WINDOW_PROBES.items()] if "cost_forwards" not in vars(cls)]
    assert not lacking


def test_every_paper_model_is_estimated_and_an_own_checkpoint_is_named():
    """Every paper model's config is read (remote-code ones through their loader's native_config); a job whose
    model has no published config (model=hf: your own checkpoint) is listed as not estimated, with why."""
    from kamera.models import model_names
    from kamera.models.flops import paper_model_flops

    for name in model_names("paper"):
        if name != "hf":
            assert paper_model_flops(name).decoder > 0, name
    rows, total = experiment_hours(["experiment=fig9", "model=hf,llava_1_5_7b"])
    by_model = {r.model: r for r in rows}
    assert math.isnan(by_model["hf"].hours) and "hf" in by_model["hf"].note
    assert by_model["llava_1_5_7b"].hours > 0 and total == pytest.approx(by_model["llava_1_5_7b"].hours)


def test_a_cost_block_missing_what_a_job_needs_is_named(capsys):
    with pytest.raises(ValueError, match=r"no cost\.tokens for mm_niah"):
        experiment_hours(["experiment=table3", "~cost.tokens.mm_niah"])
    assert main(["experiment=table4", "~cost.items"]) == 2
    assert "n_items is null" in capsys.readouterr().err


@pytest.mark.parametrize("experiment", per_experiment(paper_experiments()))
def test_every_paper_experiment_states_its_estimated_cost(experiment):
    cfg = compose_config([f"experiment={experiment}"])
    stated = cfg.get("cost")
    assert stated is not None and stated.get("h100_hours") is not None, f"{experiment} states no cost"
    rows, total = experiment_hours([f"experiment={experiment}"])
    assert rows and math.isfinite(total) and total > 0
    assert float(stated.h100_hours) == pytest.approx(total, rel=0.1), (experiment, total)


def test_check_lists_a_stale_or_missing_stated_cost(capsys):
    (stale,) = check(["fig3"], ["cost.h100_hours=99"])
    assert stale[:2] == ("fig3", 99.0) and stale[2] == pytest.approx(
        compose_config(["experiment=fig3"]).cost.h100_hours, rel=0.1
    )
    assert check(["fig3"], ["~cost.h100_hours"])[0][1] is None


def test_tokens_replace_the_stated_ones_and_bad_ones_are_refused(capsys):
    _, stated = experiment_hours(["experiment=table1"])
    _, longer = experiment_hours(["experiment=table1"], {"videomme_window": 1024})  # per chunk for a window bench
    assert longer > stated
    assert main(["experiment=fig3", "--tokens", "videomme=0"]) == 2
    assert "cost.tokens.videomme has n=0" in capsys.readouterr().err
    assert main(["experiment=fig3", "cost.tokens.videomme.n_b=9000"]) == 2
    assert "n_b=9000 > n=4200" in capsys.readouterr().err
    assert main(["experiment=table1", "--tokens", "videomme=512"]) == 2  # table1 reads videomme_window
    assert "tokens given for videomme, which no job of this sweep reads" in capsys.readouterr().err


def test_model_flops_leaves_the_published_config_as_it_was():
    """Counting FLOPs must not edit the shaped spec's config (its digest is the shaped cache key)."""
    import copy

    config = published_config("internvl3_8b")
    before = copy.deepcopy(config)
    model_flops("internvl3_8b", config)
    assert config == before
