"""A model is declared once: its conf/model/<name>.yaml carries the registry entry; a paper model's published
config.json is a data file beside its shaped writer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kamera.models import MODELS, ModelEntry, entry, model_names
from kamera.models.registry import MODEL_CONF, ModelConfError, read_models
from kamera.models.shaped.writer import CONFIGS


def test_every_conf_model_file_is_a_registry_entry():
    files = sorted(p.stem for p in MODEL_CONF.glob("*.yaml"))
    assert sorted(MODELS) == files
    assert all(isinstance(entry(n), ModelEntry) and entry(n).name == n for n in files)
    assert model_names() == [*model_names("tiny"), *model_names("toy"), *model_names("paper")]
    assert {"tiny_qwen2_5_vl", "toy_binding", "qwen2_5_vl_7b", "gemma3n_e4b"} <= set(files)


@pytest.mark.integration
def test_published_configs_are_the_shaped_specs_configs():
    """Each configs/<model>.json is its shaped spec's config. Checked in a fresh interpreter: transformers' config
    classes fill defaults into the dict they are given (``AutoConfig.for_model(**config)`` in the cost model),
    so in a process that has computed FLOPs a spec's config may already carry them."""
    stems = sorted(p.stem for p in CONFIGS.glob("*.json"))
    assert stems
    code = ("import sys; from kamera.models.shaped import shaped_writer; from kamera.models.shaped.writer import "
            "published_json; bad = [n for n in sys.argv[1:] if shaped_writer(n).spec.config != published_json(n)]; "
            "print(bad); sys.exit(bool(bad))")
    done = subprocess.run([sys.executable, "-c", code, *stems], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def _conf(tmp_path, name: str, body: str):
    (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ndtype: bfloat16\npath: null\n{body}")
    return tmp_path


@pytest.mark.parametrize("body, message", [
    ("", "no 'entry' mapping"),
    ("entry:\n  family: llava\n", r"missing key\(s\) \['attention'\]"),
    ("entry:\n  family: llava\n  attention: MHA\n  colour: red\n", r"unknown key\(s\) \['colour'\]"),
    ("entry:\n  family: llava\n  attention: MHA\n  adapter: kamera.models.mha:NoSuchAdapter\n",
     "entry.adapter 'kamera.models.mha:NoSuchAdapter' cannot be resolved"),
    ("entry:\n  family: llava\n  attention: MHA\n  chat: hello\n", "entry.chat must be"),
    ("entry: [unclosed\n", "not valid YAML"),
])
def test_a_malformed_model_file_is_one_line_naming_it(tmp_path, body, message):
    with pytest.raises(ModelConfError, match=message) as err:
        read_models(_conf(tmp_path, "m", body))
    assert "conf/model/m.yaml" in str(err.value) and "\n" not in str(err.value)


def test_a_file_must_name_its_own_model(tmp_path):
    (tmp_path / "a.yaml").write_text("name: b\nentry: {family: x, attention: GQA}\n")
    with pytest.raises(ModelConfError, match="name: a"):
        read_models(tmp_path)


def test_a_minimal_paper_entry(tmp_path):
    body = "entry:\n  family: llava\n  attention: MHA\n  hf_id: org/Repo-7B\n  load_kwargs: {a: 1}\n"
    e = read_models(_conf(tmp_path, "m", body))["m"]
    assert (e.kind, e.repo_dir, e.has_adapter, e.load_kwargs) == ("paper", "Repo-7B", False, (("a", 1),))


def test_every_paper_family_is_its_published_model_type():
    """A paper entry's family is the model_type its checkpoint's config.json states: model.path on a checkpoint of
    another type is refused in preflight (kamera.models.registry.family_mismatch), so the two must agree."""
    import json

    for p in sorted(CONFIGS.glob("*.json")):
        assert json.loads(p.read_text())["model_type"] == entry(p.stem).family, p.stem


def test_the_own_checkpoint_entry(tmp_path):
    e = entry("hf")
    assert (e.kind, e.from_checkpoint, e.has_adapter, e.hf_id) == ("paper", True, True, None)
    with pytest.raises(ModelConfError, match=r"entry\.from_checkpoint must be true or false"):
        read_models(_conf(tmp_path, "m", "entry:\n  family: auto\n  attention: auto\n  from_checkpoint: yes please\n"))
