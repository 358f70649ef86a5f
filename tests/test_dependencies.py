"""pyproject.toml declares every third-party package kamera and the renderers import, with floors the code needs."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kamera", "experiments")

# Import name → distribution name, where they differ.
DISTRIBUTIONS = {
    "PIL": "pillow",
    "cv2": "opencv-python-headless",
    "yaml": "pyyaml",
    "fitz": "pymupdf",
    "hydra": "hydra-core",
    "hydra_plugins": "hydra-submitit-launcher",
    "flash_attn": "flash-attn",
    "sklearn": "scikit-learn",
}

# Packages used without an import of ours: transformers' apply_chat_template (kamera/models/loading.py) renders the
# checkpoints' chat templates with jinja2, which transformers declares only as its "chat-template" extra.
USED_INDIRECTLY = {"jinja2": "kamera/models/loading.py: tokenizer.apply_chat_template"}

# Floors the code needs: (distribution, lowest version, what needs it).
FLOORS = [("datasets", (4, 0), "datasets.List in kamera/data/muirbench.py")]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> dict[str, str]:
    """Every distribution of ``dependencies`` and ``optional-dependencies`` → its requirement string."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {_name(r): r for r in reqs}


def third_party_imports() -> dict[str, set[str]]:
    """Top-level name of every absolute import (module-level and function-local) under kamera/ and experiments/
    that is neither the standard library nor ours → the files importing it."""
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES and top != "__future__":
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_declared_in_pyproject():
    declared = _declared()
    imports = third_party_imports()
    assert {"torch", "transformers", "PIL"} <= imports.keys()  # the walk reads the package
    missing = sorted(f"{DISTRIBUTIONS.get(top, top).lower()} (import {top}: {', '.join(sorted(files)[:3])})"
                     for top, files in imports.items()
                     if DISTRIBUTIONS.get(top, top).lower().replace("_", "-") not in declared)
    assert not missing, "imported but not declared in pyproject.toml: " + "; ".join(missing)


def test_packages_used_through_other_packages_are_declared():
    declared = _declared()
    missing = [f"{dist} ({why})" for dist, why in USED_INDIRECTLY.items() if dist not in declared]
    assert not missing, "used but not declared in pyproject.toml: " + "; ".join(missing)


def test_declared_floors_are_the_ones_the_code_needs():
    declared = _declared()
    for dist, floor, why in FLOORS:
        match = re.search(r">=\s*([0-9][0-9.]*)", declared.get(dist, ""))
        assert match, f"{dist} has no >= floor in pyproject.toml ({why} needs >= {'.'.join(map(str, floor))})"
        have = tuple(int(p) for p in match.group(1).split(".") if p)
        assert have >= floor, f"{declared[dist]}: {why} needs {dist} >= {'.'.join(map(str, floor))}"
