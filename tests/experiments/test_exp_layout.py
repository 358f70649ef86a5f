"""A table is one declarative file plus one renderer: the lists of artifacts are read off conf/experiment.

Every paper table and figure is ``conf/experiment/<name>.yaml`` (with its ``paper:`` block) and
``<name>_tiny.yaml`` (derived from it), drawn by ``experiments/<name>.py`` and checked by a golden file;
the Makefile's ARTIFACTS, the twin and paper-config test lists and docs/reproduction.md follow from them.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_exp_configs import PAPER
from test_exp_twins import TWINS

from experiments.common import DOCS, EXPERIMENTS, artifacts, docs_table, paper_values

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
