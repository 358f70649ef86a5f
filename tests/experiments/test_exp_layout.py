"""A table is one declarative file plus one renderer: the lists of artifacts are read off conf/experiment.

Every paper table and figure is ``conf/experiment/<name>.yaml`` (with its ``paper:`` block) and
``<name>_tiny.yaml`` (derived from it), drawn by ``experiments/<name>.py`` and checked by a golden file;
the Makefile's ARTIFACTS, the twin and paper-config test lists and docs/reproduction.md follow from them.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_exp_configs import PAPER
from test_exp_twins import TWINS

from experiments.artefact_map import DOCS, docs_table
from experiments.paper import EXPERIMENTS, PROSE, artifacts, paper_prose, paper_values

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.integration
def test_makefile_artifacts_are_the_conf_pairs():
    out = subprocess.run(["make", "-s", "--no-print-directory", "artifacts"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    assert sorted(out) == artifacts() and len(out) == len(set(out))
    assert out[-1] == "fig11"  # reads the rows of table4 / table6 at paper scale: after them


def test_test_lists_and_goldens_are_artifacts():
    assert set(TWINS) <= set(artifacts()) and set(PAPER) <= set(artifacts())
    goldens = {p.stem.removesuffix("_figure") for p in GOLDEN.glob("*.md")}
    assert goldens == set(artifacts()), goldens ^ set(artifacts())  # one golden (at least) per artifact, no orphan


@pytest.mark.parametrize("name", artifacts())
def test_every_artifact_is_a_pair_a_paper_block_and_a_renderer(name):
    paper = OmegaConf.load(EXPERIMENTS / f"{name}.yaml")
    tiny = OmegaConf.load(EXPERIMENTS / f"{name}_tiny.yaml")
    assert list(tiny.defaults) == [f"/experiment/{name}", "_self_"], "the tiny twin derives from its paper config"
    assert "paper" not in tiny, "the paper's values live in the paper config only"
    values = paper_values(name)
    assert values.get("title") and values.get("summary"), "docs/reproduction.md's row"
    module = importlib.import_module(f"experiments.{paper.renderer}")
    assert callable(module.render) and callable(module.main)
    tree = ast.parse(Path(module.__file__).read_text())
    constants = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                 if isinstance(t, ast.Name) and t.id.startswith("PAPER")]
    assert not constants, f"paper values belong in the paper: block, not {constants}"


def test_docs_reproduction_is_current():
    """docs/reproduction.md's artifact table is generated (python -m experiments.common --docs)."""
    text = DOCS.read_text()
    assert docs_table(text) == text, "stale: run python -m experiments.common --docs"
    for name in artifacts():
        assert f"| `{name}` | `{name}`, `{name}_tiny` | {paper_values(name)['summary']} |" in text


def test_paper_prose_is_filled_from_the_blocks_own_values():
    block = {"title": "T", "models": {"a": {"eta": -0.68, "acc": 0.41}, "b": {"eta": 0.29, "acc": 0.3}},
             "by_rank": {16: 0.82}, "word": "≈ 1e-3",
             "summary": "{models.*.eta!m:+.2f}; {models.a.acc!z:.2f}; {models.*.acc:.2f}; {by_rank.16}; {word}; {{x}}; "
                        "{models.*.acc!M:.2f}; {models.*.eta!R:.1f}",
             "note": "Paper: {summary}."}
    out = paper_prose(block)
    assert out["summary"] == "−0.68 / +0.29; .41; 0.41 / 0.30; 0.82; ≈ 1e-3; {x}; 0.41; -0.7–0.3"
    assert out["note"] == f"Paper: {out['summary']}." and out["models"] == block["models"]
    with pytest.raises(ValueError, match=r"paper\.note of 'T': .*no value at 'nope'"):
        paper_prose({**block, "note": "{models.a.nope}"})


@pytest.mark.parametrize("name", artifacts())
def test_no_paper_sentence_restates_a_value_of_its_block(name):
    """Each number is written once: a decimal the summary or note spells out is not one of the block's values
    (it is a {field} of it instead), so the sentence and the cell cannot drift apart."""
    raw = OmegaConf.to_container(OmegaConf.load(EXPERIMENTS / f"{name}.yaml").get("paper"), resolve=True)

    def numbers(node: object) -> set[float]:
        if isinstance(node, dict):
            return set().union(*map(numbers, node.values())) if node else set()
        if isinstance(node, list):
            return set().union(*map(numbers, node)) if node else set()
        if isinstance(node, float):
            return {round(node, 4)}
        return {round(float(x), 4) for x in re.findall(r"\d+\.\d+", node)} if isinstance(node, str) else set()

    values = numbers({k: v for k, v in raw.items() if k not in PROSE})
    for key in PROSE:
        literal = {
            round(float(x), 4) for x in re.findall(r"(?<![\w{.])\d*\.\d+", re.sub(r"\{[^}]*\}", "", raw.get(key, "")))
        }
        assert not literal & values, f"{name}: paper.{key} writes {sorted(literal & values)} again; use a {{field}}"
