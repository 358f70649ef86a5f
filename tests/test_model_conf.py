"""A model is declared once: its conf/model/<name>.yaml carries the registry entry; a paper model's published
config.json is a data file beside its shaped writer."""

from __future__ import annotations

import shutil
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
    ("entry:\n  family: llava\n  attention: MHA\n  shaped_sources: {config.json: 3}\n",
     "entry.shaped_sources must be file → source strings"),
    ("entry:\n  family: llava\n  attention: MHA\n  by_path: maybe\n", "entry.by_path must be true or false"),
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
    another type is refused in preflight (kamera.models.problems.family_mismatch), so the two must agree."""
    import json

    for p in sorted(CONFIGS.glob("*.json")):
        assert json.loads(p.read_text())["model_type"] == entry(p.stem).family, p.stem


def test_the_own_checkpoint_entry(tmp_path):
    e = entry("hf")
    assert (e.kind, e.from_checkpoint, e.has_adapter, e.hf_id) == ("paper", True, True, None)
    with pytest.raises(ModelConfError, match=r"entry\.from_checkpoint must be true or false"):
        read_models(_conf(tmp_path, "m", "entry:\n  family: auto\n  attention: auto\n  from_checkpoint: yes please\n"))


def test_a_paper_model_of_a_served_family_is_its_yaml_and_its_published_config(tmp_path, monkeypatch):
    """Adding a model of a family kamera serves is two data files, no Python: a copy of a family member's
    conf/model file (new name, Hub id, sources) and its published config.json. Here a smaller Qwen2.5-VL (its own
    sizes in the config) becomes a registered paper model with a shaped spec built from exactly those two files,
    its own FLOPs, a fetch hint naming its repo, and the family still served by path by the 7B's entry."""
    import json

    import yaml

    from kamera.models import model_problems, registry
    from kamera.models.checkpoints import served_families
    from kamera.models.flops import paper_model_flops
    from kamera.models.shaped import cache_key, shaped_spec
    from kamera.models.shaped import writer as shaped_writer_module

    conf, configs = tmp_path / "model", tmp_path / "configs"
    shutil.copytree(MODEL_CONF, conf)
    shutil.copytree(CONFIGS, configs)
    node = yaml.safe_load((MODEL_CONF / "qwen2_5_vl_7b.yaml").read_text())
    node["name"] = "qwen2_5_vl_small"
    node["entry"]["hf_id"] = "example/Qwen2.5-VL-Small"
    node["entry"]["shaped_sources"] = {"config.json": "a test's config: the 7B's with a narrower decoder"}
    (conf / "qwen2_5_vl_small.yaml").write_text(yaml.safe_dump(node, sort_keys=False))  # file 1: the YAML
    config = json.loads((CONFIGS / "qwen2_5_vl_7b.json").read_text())
    config.update(hidden_size=2048, intermediate_size=11008, num_attention_heads=16, num_key_value_heads=2,
                  num_hidden_layers=36)
    config["vision_config"]["out_hidden_size"] = 2048
    (configs / "qwen2_5_vl_small.json").write_text(json.dumps(config))  # file 2: the published config
    monkeypatch.setattr(registry.MODELS, "_entries", registry.read_models(conf))  # the registry, as read from conf
    monkeypatch.setattr(shaped_writer_module, "CONFIGS", configs)
    shaped_spec.cache_clear()

    spec, big = shaped_spec("qwen2_5_vl_small"), shaped_spec("qwen2_5_vl_7b")
    assert spec.config == config and spec.sources == node["entry"]["shaped_sources"]
    assert spec.shaped_config(2, 2)["hidden_size"] == 2048 and spec.files == big.files
    assert cache_key("qwen2_5_vl_small", 2, 2, 0) != cache_key("qwen2_5_vl_7b", 2, 2, 0)
    assert paper_model_flops("qwen2_5_vl_small").decoder < paper_model_flops("qwen2_5_vl_7b").decoder
    assert served_families()["qwen2_5_vl"].name == "qwen2_5_vl_7b"
    (line,) = model_problems("qwen2_5_vl_small", models_root=tmp_path / "nowhere")
    assert "hf download example/Qwen2.5-VL-Small" in line
    shaped_spec.cache_clear()
