"""The shipped toy weights match kamera/toy/weights.sha256, and preflight names a file that does not (issue 19
item 8: the toy weights' digest)."""

from __future__ import annotations

import shutil

from kamera.job import preflight
from kamera.sweep import compose_config
from kamera.toy.digests import ROOT, main, weight_problems


def test_the_shipped_weights_match_their_digests():
    assert main([]) == 0
    assert preflight(compose_config(["model=toy_binding", "bench=binding", "n_items=1"])) == []


def test_an_edited_missing_or_extra_file_is_one_line_each(tmp_path):
    root = tmp_path / "toy"
    shutil.copytree(ROOT / "weights" / "image", root / "weights" / "image")
    shutil.copy(ROOT / "weights.sha256", root / "weights.sha256")
    folder = root / "weights" / "image"
    assert weight_problems(folder, root) == []
    cfg = folder / "config.json"
    cfg.write_text(cfg.read_text().replace("}", " }", 1))  # same JSON, other bytes: retrained or edited by hand
    (line,) = weight_problems(folder, root)
    assert line.startswith(f"{cfg}: sha256") and "differs from the shipped" in line and "--update" in line
    (folder / "train.json").unlink()
    (folder / "notes.txt").write_text("x")
    lines = weight_problems(folder, root)
    assert len(lines) == 3 and any("train.json: missing" in p for p in lines)
    assert any("notes.txt: not listed" in p for p in lines)
