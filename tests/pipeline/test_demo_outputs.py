"""``make demo`` leaves the tree clean (issue 40, the hostile pass's item f): it renders Table 3 and Fig. 5 into
``DEMO_DIR`` (``results/demo``, git-ignored), not over the tracked tiny outputs, whose footers name the commit the
rows were made at (so a demo on any later commit rewrote them, and every later footer said the tree was dirty)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACKED = ("results/tables", "figures")  # where make table3 / fig5 / tiny-all write the committed record


def makefile_variable(name: str) -> str:
    (value,) = re.findall(rf"^{name} \?= *(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    return value


def demo_recipe() -> str:
    return (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]


def test_make_demo_renders_into_a_git_ignored_folder_not_over_the_tracked_outputs():
    demo = makefile_variable("DEMO_DIR")
    assert not demo.startswith(TRACKED) and demo.rstrip("/") + "/" in (ROOT / ".gitignore").read_text().split("\n")
    recipe = demo_recipe()
    assert "RENDER_ARGS='paths.tables=$(DEMO_DIR) paths.figures=$(DEMO_DIR)'" in recipe
    makefile = (ROOT / "Makefile").read_text()
    (render,) = re.findall(r"^render = (.*)$", makefile, re.M)
    assert "$(RENDER_ARGS)" in render  # the render writes there; the sweep's overrides (and job keys) are unchanged
    sweep = makefile.split("define sweep", 1)[1].split("endef", 1)[0]
    assert "RENDER_ARGS" not in sweep
    assert "results/tables/" not in recipe and "figures/" not in recipe  # nor does it name the tracked files


@pytest.mark.integration
def test_make_demo_dry_run_renders_only_into_the_ignored_folder():
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    renders = [line for line in out.splitlines() if "experiments.common" in line]
    assert len(renders) == 2 and all("paths.tables=results/demo paths.figures=results/demo" in r for r in renders)
    if shutil.which("git") and (ROOT / ".git").exists():
        for name in ("table3_tiny.md", "fig5_tiny.png"):
            ignored = subprocess.run(["git", "check-ignore", "-q", f"results/demo/{name}"], cwd=ROOT)
            assert ignored.returncode == 0, name
