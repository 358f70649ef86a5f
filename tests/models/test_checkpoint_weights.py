"""A config.json that is not its weights' own is refused (issue 40, the hostile pass's items a and b): preflight builds
the model class from the config on the meta device and compares every tensor with the safetensors headers (missing,
unexpected, misshapen; tied weights and buffers are not missing), and the load itself refuses what transformers
reports missing, unexpected or misshapen. Before: a ``qwen2`` config over llama weights ran to exit 0 on q/k/v
biases initialised at random, and ``hidden_size: 999`` got "preflight ok" then a traceback at load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_own_checkpoint import text_checkpoint, twin_checkpoint

from kamera.job import JobError, checks, preflight
from kamera.run import runner
from kamera.sweep import compose_config


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return text_checkpoint(tmp_path_factory.mktemp("ckpt") / "my-llama", "llama")


def edited(src: Path, out: Path, **config) -> Path:
    """A copy of the checkpoint ``src`` with config.json's keys set as given."""
    shutil.copytree(src, out)
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, **config}))
    return out


def job(tmp_path: Path, ckpt: Path):
    return compose_config(
        [
            f"paths.results={tmp_path}/raw",
            f"paths.outputs={tmp_path}/out",
            "device=cpu",
            "model.dtype=float32",
            "model=hf",
            f"model.path={ckpt}",
            "bench=binding_words",
            "arms=[reprefill,blind]",
            "n_items=1",
        ]
    )


def refused_before_load(tmp_path: Path, ckpt: Path, monkeypatch, *named: str) -> str:
    """The job's preflight line naming every string of ``named``; the run stops there, no weights loaded."""
    cfg = job(tmp_path, ckpt)
    (line,) = [p for p in preflight(cfg) if all(n in p for n in named)] or [preflight(cfg)]
    monkeypatch.setattr(runner, "load_model", lambda *a, **k: pytest.fail("weights were loaded"))
    with pytest.raises(JobError, match="cannot start this job"):
        runner.run(cfg)
    assert not (tmp_path / "raw").exists() or not list((tmp_path / "raw").rglob("*.parquet"))
    return line


def test_the_own_config_passes(tmp_path, llama):
    assert preflight(job(tmp_path, llama)) == []


def test_a_config_of_another_family_over_the_weights_is_refused_naming_the_missing_tensors(
    tmp_path, llama, monkeypatch
):
    ckpt = edited(llama, tmp_path / "qwen2-over-llama", model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    line = refused_before_load(
        tmp_path,
        ckpt,
        monkeypatch,
        "6 tensor(s) Qwen2ForCausalLM needs are not in the checkpoint",
        "model.layers.0.self_attn.k_proj.bias",
        "initialised at random",
    )
    assert "\n" not in line


def test_a_hidden_size_the_weights_do_not_have_is_refused_before_load(tmp_path, llama, monkeypatch):
    # 999: transformers cannot build the config (not a multiple of the heads); the line names the file's embedding
    ckpt = edited(llama, tmp_path / "h999", hidden_size=999)
    refused_before_load(
        tmp_path,
        ckpt,
        monkeypatch,
        "config.json does not describe these weights",
        "hidden_size 999 is not the checkpoint's embedding model.embed_tokens.weight [512, 128]",
    )
    # 256 builds: every tensor's shape is compared, the first few named
    ckpt = edited(llama, tmp_path / "h256", hidden_size=256)
    refused_before_load(
        tmp_path / "2",
        ckpt,
        monkeypatch,
        "have another shape than its config.json gives",
        "model.embed_tokens.weight [512, 128] vs [512, 256]",
    )


def test_tensors_the_config_has_no_place_for_are_named(tmp_path, llama, monkeypatch):
    ckpt = edited(llama, tmp_path / "one-layer", num_hidden_layers=1)
    refused_before_load(
        tmp_path, ckpt, monkeypatch, "tensor(s) in the checkpoint have no place in LlamaForCausalLM", "model.layers.1."
    )


def test_tied_weights_and_buffers_are_not_missing_weights(tmp_path):
    tied = text_checkpoint(tmp_path / "tied", "llama", tie_word_embeddings=True)
    weights = load_file(tied / "model.safetensors")
    assert "lm_head.weight" not in weights  # save_pretrained writes the tied head once
    # an old checkpoint's RoPE buffer in the file is no unexpected weight either (transformers ignores it too)
    weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(16)
    save_file(weights, tied / "model.safetensors", metadata={"format": "pt"})
    assert preflight(job(tmp_path, tied)) == []


def test_a_vision_family_checkpoint_is_compared_through_its_renamed_keys(tmp_path, monkeypatch):
    """A Qwen2.5-VL checkpoint as save_pretrained writes it (the Hub's key names, which transformers renames on load)
    passes; its text width changed in config.json is refused."""
    ckpt = twin_checkpoint(tmp_path / "vl", "tiny_qwen2_5_vl")
    assert checks.fit_problems("hf", ckpt) == []
    cfg = json.loads((ckpt / "config.json").read_text())
    wide = {
        **cfg,
        "text_config": {**cfg["text_config"], "intermediate_size": 2 * cfg["text_config"]["intermediate_size"]},
    }
    (ckpt / "config.json").write_text(json.dumps(wide))
    (line,) = checks.fit_problems("hf", ckpt)
    assert "have another shape than its config.json gives Qwen2_5_VLForConditionalGeneration" in line
    assert "mlp.down_proj.weight" in line


def test_weights_that_do_not_load_as_the_config_says_stop_the_job_at_load(tmp_path, llama, monkeypatch):
    """What the header check cannot see (a tensor transformers fuses on load) is refused by the load itself: what
    from_pretrained reports missing is a JobError naming it, never a run on initialised weights."""
    ckpt = edited(llama, tmp_path / "qwen2-over-llama", model_type="qwen2", architectures=["Qwen2ForCausalLM"])
    monkeypatch.setattr(checks, "fit_problems", lambda name, ckpt: [])  # as if preflight could not compare
    with pytest.raises(
        JobError,
        match=r"cannot load the model: hf: .*qwen2-over-llama: its weights do not load as "
        r"Qwen2ForCausalLM .* 6 missing from the checkpoint, would be initialised at random "
        r"\(model\.layers\.0\.self_attn\.k_proj\.bias",
    ):
        runner.run(job(tmp_path, ckpt))
    assert not list((tmp_path / "raw").rglob("*.parquet"))
