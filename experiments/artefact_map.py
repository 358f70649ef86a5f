"""The generated maps: docs/reproduction.md's artifact table (from the paper: blocks) and the README's artefact map
(from the configs: outputs read off each renderer, H100-hours off its ``cost:`` block), written by
``python -m experiments.common --docs`` and checked by ``--check``."""

from __future__ import annotations

import re
from collections.abc import Callable

from omegaconf import OmegaConf

from experiments.paper import EXPERIMENTS, ROOT, artifacts, paper_values
from kamera.job.store import atomic_write_text

DOCS = ROOT / "docs" / "reproduction.md"
README = ROOT / "README.md"  # its artefact map (:func:`readme_table`)
DOCS_ROW = re.compile(r"^\| (?P<title>[^|]*) \| `(?P<name>[a-z0-9_]+)` \| [^|]* \| [^|]* \| (?P<status>[^|]*) \|$")


def regenerate(text: str, row: re.Pattern, keep: str, where: str, line_of: Callable[[str, str | None], str]) -> str:
    """``text`` with its artefact table (the lines ``row`` matches) rebuilt: one line per :func:`artifacts` entry,
    ``line_of(name, kept)``, in the text's order (new entries last, ``kept`` None); each row's ``keep`` column is
    kept as written. SystemExit naming ``where`` when the text has no such table."""
    lines = text.split("\n")
    rows = [i for i, line in enumerate(lines) if row.match(line)]
    if not rows:
        raise SystemExit(where)
    kept = {m["name"]: m[keep] for m in (row.match(lines[i]) for i in rows)}
    names = [n for n in kept if n in artifacts()] + [n for n in artifacts() if n not in kept]
    table = [line_of(name, kept.get(name)) for name in names]
    return "\n".join([*lines[: rows[0]], *table, *lines[rows[-1] + 1 :]])


def docs_table(text: str) -> str:
    """docs/reproduction.md with its artifact table regenerated from the paper: blocks: one row per
    :func:`artifacts` entry (its ``paper.title``, target, configs and ``paper.summary``), in the doc's order
    (new artifacts last, status "not run yet"); each row's status and the rest of the prose kept as written."""

    def line_of(name: str, status: str | None) -> str:
        paper = paper_values(name)
        missing = [k for k in ("title", "summary") if not paper.get(k)]
        if missing:
            raise SystemExit(f"conf/experiment/{name}.yaml: its paper: block lacks {', '.join(missing)}")
        return (f"| {paper['title']} | `{name}` | `{name}`, `{name}_tiny` | {paper['summary']} | "
                f"{'not run yet' if status is None else status} |")

    where = f"{DOCS}: no artifact table (rows | title | `name` | configs | paper | status |)"
    return regenerate(text, DOCS_ROW, "status", where, line_of)


README_ROW = re.compile(r"^\| (?P<title>[^|]*) \| `make (?P<name>[a-z0-9_]+)` \| [^|]* \| (?P<tiny>[^|]*) \| [^|]* \|$")


def outputs_of(name: str) -> str:
    """The files ``make <name>`` writes, read off its renderer: a table's .md and .tex, a figure's .pdf, .png, .md."""
    renderer = OmegaConf.load(EXPERIMENTS / f"{name}.yaml").renderer
    source = (ROOT / "experiments" / f"{renderer}.py").read_text()
    kinds = [f"`results/tables/{name}[_tiny].{{md,tex}}`"] if "table_outputs(" in source else []
    return " and ".join(kinds + ([f"`figures/{name}[_tiny].{{pdf,png,md}}`"] if "figure_outputs(" in source else []))


def readme_table(text: str) -> str:
    """README.md with its artefact map regenerated: one row per :func:`artifacts` entry (its ``paper.title``, target,
    outputs and the H100-hours its ``cost:`` block states), in the README's order (new ones last, tiny time "–");
    each row's tiny time on 2 CPU cores is kept as written (a measured time, not derivable)."""

    def line_of(name: str, tiny: str | None) -> str:
        hours = (OmegaConf.load(EXPERIMENTS / f"{name}.yaml").get("cost") or {}).get("h100_hours")
        return (f"| {paper_values(name)['title']} | `make {name}` | {outputs_of(name)} | "
                f"{'–' if tiny is None else tiny} | {'–' if hours is None else f'{hours:g}'} |")

    where = f"{README}: no artefact table (rows | title | `make name` | outputs | tiny | H100-hours |)"
    return regenerate(text, README_ROW, "tiny", where, line_of)


def docs(check: bool = False) -> int:
    """``--docs``: rewrite docs/reproduction.md's artifact table from the paper: blocks and the README's artefact map
    from the configs; ``--check``: exit 1 if either is stale."""
    stale = 0
    for path, make in ((DOCS, docs_table), (README, readme_table)):
        text = path.read_text()
        new = make(text)
        stale |= new != text
        if check:
            print(f"{path}: {'current' if new == text else 'stale: run python -m experiments.common --docs'}")
        elif new != text:
            atomic_write_text(path, new)
            print(f"{path}: rewritten")
        else:
            print(f"{path}: current")
    return int(check and stale)
