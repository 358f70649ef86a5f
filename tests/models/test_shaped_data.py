"""The shaped writers' published files are data, each stated once (issue 44): ``configs/<model>.json`` is a model's
config.json and ``configs/<model>/<file>`` its other published JSON files (kamera.models.shaped.writer). Every such
file belongs to a model with a config, is what some spec writes, holds what no other file holds, and is shipped by
the package data."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from kamera.models.shaped import shaped_models, shaped_spec
from kamera.models.shaped.writer import CONFIGS, published_json

ROOT = Path(__file__).resolve().parents[2]
DATA = sorted(CONFIGS.glob("*/*"))


def _written() -> list[tuple[str, dict]]:
    """(file name, content) of every file a spec writes from data: its files and its tokenizer_config.json."""
    out = []
    for name in shaped_models():
        spec = shaped_spec(name)
        out += [*spec.files.items(), ("tokenizer_config.json", spec.tokenizer.config)]
    return out


def test_each_published_file_is_a_models_and_is_written_by_a_spec():
    assert DATA
    written = _written()
    for path in DATA:
        assert (CONFIGS / f"{path.parent.name}.json").is_file(), f"{path}: no configs/{path.parent.name}.json"
        content = published_json(path.parent.name, path.name)
        assert isinstance(content, dict) and content, path
        assert (path.name, content) in written, f"{path} is written by no shaped spec"


def test_no_two_published_files_state_the_same():
    contents = {p: json.dumps(json.loads(p.read_text(encoding="utf-8")), sort_keys=True) for p in DATA}
    seen: dict[str, Path] = {}
    for path, text in contents.items():
        assert text not in seen, f"{path} repeats {seen.get(text)}"
        seen[text] = path


def test_qwen3_5_writes_qwen3_vls_preprocessor_config_from_its_one_file():
    one = published_json("qwen3_vl_8b", "preprocessor_config.json")
    assert shaped_spec("gdn_hybrid").files["preprocessor_config.json"] == one
    assert shaped_spec("qwen3_vl_8b").files["preprocessor_config.json"] == one
    assert not (CONFIGS / "gdn_hybrid" / "preprocessor_config.json").exists()


def test_a_missing_published_file_names_itself():
    with pytest.raises(FileNotFoundError, match=r"qwen3_vl_8b: no published processor_config\.json at"):
        published_json("qwen3_vl_8b", "processor_config.json")


def test_the_package_data_ships_every_published_file():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["kamera"]
    package = ROOT / "kamera"
    shipped = {p for pattern in patterns for p in package.glob(pattern) if p.is_file()}
    assert {p.resolve() for p in CONFIGS.rglob("*.json")} <= {p.resolve() for p in shipped}
