"""The prologue the remote-code loaders share (``kamera.models.hub_checkpoint.open_remote``): each loader fails on
a bad checkpoint directory at the same step, with the same message, before any shard is read; no weights needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from kamera.models import internvl_chat, kimi_vl, phi3_v
from kamera.models.hub_checkpoint import (
    CheckpointMismatchError,
    HubCheckpoint,
    Load,
    WeightPlan,
    open_remote,
)

MODULES = {"kimi_vl_a3b": kimi_vl, "phi3_5_vision": phi3_v, "internvl_chat_v1_1": internvl_chat}
LOADERS = {
    "kimi_vl_a3b": kimi_vl.load_kimi_vl_a3b,
    "phi3_5_vision": phi3_v.load_phi3_5_vision,
    "internvl_chat_v1_1": internvl_chat.load_internvl_chat_v1_1,
}


def load(name: str, path: Path):
    return LOADERS[name](path, dtype=torch.float32, device="cpu", attn_implementation="sdpa")


def directory(path: Path, config: dict | None = None, preprocessor: dict | None = None) -> Path:
    path.mkdir()
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    if preprocessor is not None:
        (path / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    return path


@pytest.mark.parametrize("name", MODULES)
def test_each_step_fails_by_itself_in_order(name, tmp_path):
    mod = MODULES[name]
    with pytest.raises(CheckpointMismatchError, match=r"config\.json is missing"):
        load(name, directory(tmp_path / "empty"))
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "config.json").write_text("{")
    with pytest.raises(CheckpointMismatchError, match=r"config\.json is not valid JSON"):
        load(name, tmp_path / "corrupt")
    # the native config is checked before the preprocessor config is read (there is none here)
    with pytest.raises(CheckpointMismatchError, match="model_type"):
        load(name, directory(tmp_path / "type", mod.HUB_CONFIG | {"model_type": "llama"}))
    with pytest.raises(CheckpointMismatchError, match=r"preprocessor_config\.json is missing"):
        load(name, directory(tmp_path / "noproc", mod.HUB_CONFIG))
    bad = {k: v for k, v in mod.HUB_PREPROCESSOR.items() if k != "image_mean"}
    with pytest.raises(CheckpointMismatchError, match=r"preprocessor_config\.json lacks or mistypes 'image_mean'"):
        load(name, directory(tmp_path / "badproc", mod.HUB_CONFIG, bad))
    with pytest.raises(CheckpointMismatchError, match=r"neither model\.safetensors\.index\.json nor"):
        load(name, directory(tmp_path / "noshards", mod.HUB_CONFIG, mod.HUB_PREPROCESSOR))


def test_internvl_checks_the_tile_against_the_tower_before_the_shards(tmp_path):
    path = directory(tmp_path / "tile", internvl_chat.HUB_CONFIG, internvl_chat.HUB_PREPROCESSOR | {"crop_size": 224})
    with pytest.raises(CheckpointMismatchError, match=r"preprocessor crop_size 224 is not the tower's 448 px"):
        load("internvl_chat_v1_1", path)


def test_open_remote_gives_what_the_loaders_build_on_and_load_fills_the_model(tmp_path):
    path = directory(tmp_path / "ckpt", kimi_vl.HUB_CONFIG, kimi_vl.HUB_PREPROCESSOR)
    weight = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    save_file({"w": weight}, str(path / "model.safetensors"))
    seen = []
    remote = open_remote(
        str(path), kimi_vl.native_config, kimi_vl.MoonViTImageProcessor, lambda *a: seen.append(a)
    )
    assert remote.path == path and remote.hub == kimi_vl.HUB_CONFIG
    assert remote.config.to_dict() == kimi_vl.native_config(kimi_vl.HUB_CONFIG).to_dict()
    assert remote.processor == kimi_vl.MoonViTImageProcessor.from_dict(kimi_vl.HUB_PREPROCESSOR)
    assert seen == [(path, remote.hub, remote.processor)]
    assert isinstance(remote.ckpt, HubCheckpoint) and remote.ckpt.shapes == {"w": (3, 2)}
    model = remote.load(lambda: torch.nn.Linear(2, 3, bias=False), WeightPlan([Load.copy("weight", "w")]), "cpu")
    assert torch.equal(model.weight.detach(), weight)
    with pytest.raises(CheckpointMismatchError, match="the native model needs"):  # the plan is checked first
        remote.load(lambda: torch.nn.Linear(3, 2, bias=False), WeightPlan([Load.copy("weight", "w")]), "cpu")
