"""The README's notebook snippet runs as written (with two images supplied)."""

from __future__ import annotations

import re
from pathlib import Path

from tinyfamilies import noise_image

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_notebook_snippet_runs():
    block = re.search(r"## In a notebook\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    scope = {"image_a": noise_image(1), "image_b": noise_image(2)}
    exec(compile(block, "README.md", "exec"), scope)
    assert scope["kl16"] >= 0.0 and scope["patch"].effective_rank == 16


def test_readme_fetches_checkpoints_with_hf_download():
    """Current huggingface_hub ships ``hf download``; the deprecated ``huggingface-cli`` is not what we tell users."""
    text = README.read_text()
    assert "hf download Qwen/Qwen2.5-VL-7B-Instruct" in text and "huggingface-cli" not in text


def test_the_docs_index_names_every_doc_once():
    """docs/README.md indexes every file of docs/ in one line each: a new doc without its line fails here."""
    docs = README.parent / "docs"
    listed = re.findall(r"^- \[([\w.]+\.md)\]\(\1\): \S", (docs / "README.md").read_text(), re.M)
    assert sorted(listed) == sorted(p.name for p in docs.glob("*.md") if p.name != "README.md")


def test_the_artefact_map_is_generated_from_the_configs():
    """The README's table lists every table / figure target once, with its title, outputs and the H100-hours its paper
    config states (python -m experiments.common --docs writes it; only the tiny times are written by hand)."""
    from experiments.artefact_map import readme_table
    from experiments.paper import artifacts

    text = README.read_text()
    assert readme_table(text) == text, "stale: run python -m experiments.common --docs"
    section = text.split("## Every table and figure", 1)[1].split("\n## ", 1)[0]
    assert sorted(re.findall(r"^\| [^|]+ \| `make (\w+)` \|", section, re.M)) == artifacts()


def test_every_kamera_variable_of_the_conf_and_the_makefile_is_documented():
    """The KAMERA_* variables conf/ resolves (where a run reads and writes) are named in the README's own lines and in a
    doc; those the Makefile passes (tests' threads, caches) in the README or a doc. KAMERA_OUTPUTS, Hydra's run
    folders, was in conf/paths/default.yaml and the Makefile and in no README line or doc (issue 40, item g)."""
    root = README.parent
    docs = "\n".join(p.read_text() for p in (root / "docs").glob("*.md"))
    conf = {m for p in (root / "conf").rglob("*.yaml") for m in re.findall(r"oc\.env:(KAMERA_\w+)", p.read_text())}
    make = set(re.findall(r"\bKAMERA_[A-Z_]+\b", (root / "Makefile").read_text()))
    assert "KAMERA_OUTPUTS" in conf
    text = README.read_text()
    assert [v for v in sorted(conf) if v not in text or v not in docs] == []
    assert [v for v in sorted(make) if v not in text and v not in docs] == []
