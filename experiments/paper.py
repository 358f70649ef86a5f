"""The paper's side of every experiment: its ``paper:`` block (the paper's values, and prose written as
templates over them, so each number is written once), its arms' order, and the list of paper artefacts
(``<name>`` of conf/experiment with both ``<name>.yaml`` and ``<name>_tiny.yaml``)."""

from __future__ import annotations

import copy
import functools
import re
import string
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "conf" / "experiment"  # <name>.yaml (paper scale, with its paper: block) and <name>_tiny.yaml


def artifacts() -> list[str]:
    """Every paper table and figure: each ``<name>`` of conf/experiment with both ``<name>.yaml`` and
    ``<name>_tiny.yaml`` (the Makefile's ARTIFACTS and the tests' lists are read off the same files)."""
    return sorted(p.stem for p in EXPERIMENTS.glob("*.yaml")
                  if not p.stem.endswith("_tiny") and (EXPERIMENTS / f"{p.stem}_tiny.yaml").exists())


class _PaperProse(string.Formatter):
    """Fills a ``paper:`` block's prose from its own values, so each number is written once (in the structured
    values the renderer prints beside ours) and the sentences only point at it:

        {accuracy.kimi_vl_a3b.two_page.reprefill}   a value by its dotted path (a mapping's int keys by their digits)
        {models.*.stale:+.2f}                        every key's value at that place, joined by " / "
        {...:.2f} and the other format specs         as format() writes them (a string value as written)
        {...!z:.2f}  {...!m:+.2f}                    without the leading zero (.41), with a typographic minus (−0.68)
        {models.*.e90!M:.2f}  {models.*.e90!R:.2f}   the largest of the values, their range lo–hi (0.18–0.30)
    """

    def get_field(self, field_name: str, args, kwargs) -> tuple[object, str]:
        return self._lookup(kwargs, field_name.split(".")), field_name

    def _lookup(self, node: object, path: list[str]) -> object:
        if not path:
            return node
        head, rest = path[0], path[1:]
        if head == "*" and isinstance(node, dict):
            return _Each([self._lookup(v, rest) for v in node.values()])
        if isinstance(node, dict):
            key = head if head in node else int(head) if head.lstrip("-").isdigit() and int(head) in node else None
            if key is not None:
                return self._lookup(node[key], rest)
        if isinstance(node, list) and head.isdigit() and int(head) < len(node):
            return self._lookup(node[int(head)], rest)
        raise KeyError(f"paper: block has no value at {head!r} (in a template's field)")

    def convert_field(self, value: object, conversion: str | None) -> object:
        if conversion in ("M", "R") and isinstance(value, _Each):  # the largest, or the range lo–hi, of the values
            return max(value) if conversion == "M" else _Range((min(value), max(value)))
        return (conversion, value) if conversion in ("z", "m") else super().convert_field(value, conversion)

    def format_field(self, value: object, format_spec: str) -> str:
        conversion = None
        if isinstance(value, tuple) and not isinstance(value, _Range):
            conversion, value = value
        if isinstance(value, _Range):
            return "–".join(format(v, format_spec) for v in value)
        if isinstance(value, _Each):
            return " / ".join(self.format_field((conversion, v) if conversion else v, format_spec) for v in value)
        text = value if isinstance(value, str) else format(value, format_spec)  # a string is printed as written
        if conversion == "z":
            text = re.sub(r"^([+-]?)0\.", r"\1.", text)
        elif conversion == "m":
            text = text.replace("-", "−")
        return text


class _Each(list):
    """The values a ``*`` in a template's path gathers."""


class _Range(tuple):
    """(lo, hi) of the values a ``*`` gathers (``!R``), written lo–hi."""


PROSE = ("summary", "note")  # the sentences of a paper: block, templates over its values (:class:`_PaperProse`)


def paper_prose(block: dict) -> dict:
    """``block`` with its :data:`PROSE` filled in from its own values; ValueError naming the experiment's field that
    points at no value."""
    out = dict(block)
    for key in PROSE:
        if isinstance(block.get(key), str):
            try:
                out[key] = _PaperProse().vformat(block[key], (), out)  # a later sentence may quote an earlier one
            except (KeyError, ValueError, IndexError) as err:
                raise ValueError(f"paper.{key} of {block.get('title', 'an experiment')!r}: {err}") from None
    return out


@functools.cache
def _paper_block(experiment: str) -> dict:
    cfg = OmegaConf.load(EXPERIMENTS / f"{experiment}.yaml")
    return paper_prose(OmegaConf.to_container(cfg.get("paper") or OmegaConf.create({}), resolve=True))


def paper_values(experiment: str) -> dict:
    """The ``paper:`` block of conf/experiment/<experiment>.yaml as plain data: the paper's values a renderer
    prints beside ours (a renderer called without ``paper=`` reads its own experiment's)."""
    return copy.deepcopy(_paper_block(experiment))


def arm_labels(entries: object) -> list[str]:
    """The base label of each ``arms`` entry (``patch_r16``, ``{patch_r16: {rank: 24}}``, ``{name: cacheblend, …}``)."""
    entries = OmegaConf.to_container(entries, resolve=True) if OmegaConf.is_config(entries) else entries or []
    return [e if isinstance(e, str) else e.get("name") or next(iter(e)) for e in entries]


def arm_order(arms: list[str] | None, experiment: str) -> list[str]:
    """The order a renderer lists arms in: ``arms`` (the experiment's ``arms:`` as its jobs ran them,
    :attr:`Experiment.arms`), else conf/experiment/<experiment>.yaml's: the one list of an experiment's arms."""
    if arms is not None:
        return list(arms)
    return arm_labels(OmegaConf.load(EXPERIMENTS / f"{experiment}.yaml").get("arms"))


def paper_or(paper: dict | None, experiment: str) -> dict:
    """``paper`` (the composed config's ``paper`` block, as :class:`Experiment` carries it), else the file's."""
    return paper_values(experiment) if paper is None else paper
