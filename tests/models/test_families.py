"""The one family table (kamera.models.families): the engine, the checkpoint loader and the tests read it, and no
module of kamera types a family list of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from kamera.engine.checkpoint import CHECKPOINTS
from kamera.engine.family import GQA_SERVED, MLA_SERVED, MROPE_SERVED, REFUSED, SERVED
from kamera.models.checkpoints import GGUF_SERVED, TEXT_DECODERS, supported_model_types
from kamera.models.families import FAMILIES

ROOT = Path(__file__).resolve().parents[2]


def test_every_family_is_a_transformers_model_type():
    assert set(FAMILIES) <= set(CONFIG_MAPPING_NAMES)


def test_the_engine_and_the_loader_read_the_table():
    assert SERVED == GQA_SERVED + MROPE_SERVED + MLA_SERVED
    assert set(SERVED) == {k for k, f in FAMILIES.items() if f.engine}
    assert list(TEXT_DECODERS) == [k for k, f in FAMILIES.items() if f.text_decoder]
    assert set(GGUF_SERVED) == {k for k, f in FAMILIES.items() if f.gguf}
    assert set(TEXT_DECODERS) <= set(supported_model_types())
    assert not set(REFUSED) & set(SERVED)


def test_each_engine_page_has_a_tiny_twin_and_each_twin_a_served_family():
    assert set(CHECKPOINTS) <= set(SERVED)
    assert {FAMILIES[k].engine for k in CHECKPOINTS} == {"rope", "mrope", "mla"}


def _family_lists(path: Path) -> list[str]:
    """Tuple, list and set literals of ``path`` holding two or more family names: a family list typed by hand."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in FAMILIES]
            if len(names) >= 2:
                out.append(f"{path.name}:{node.lineno}: {names}")
    return out


def test_no_module_types_a_family_list_of_its_own(tmp_path):
    found = [hit for p in sorted((ROOT / "kamera").rglob("*.py")) if p.name != "families.py"
             for hit in _family_lists(p)]
    assert not found, "\n".join(found)
    typed = tmp_path / "typed.py"  # the check can fail: a hand-typed list is found
    typed.write_text('SERVED = ("qwen2", "llama")\n')
    assert _family_lists(typed) == ["typed.py:1: ['qwen2', 'llama']"]
