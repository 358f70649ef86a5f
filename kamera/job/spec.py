"""A job's plugin lists and vocabulary: the conf directory, ``arms`` / ``probes`` / ``window_probes`` entries
built into :class:`Spec` s, the dtype spellings, and :class:`JobError`.

An entry is a conf label (``patch_r16``: a file's stem, or a label a family file lists, :func:`conf_index`), that
label with knobs overridden (``{patch_r16: {rank: 24}}``) or an inline plugin (``{name: cacheblend, ratio: 0.2}``);
every bad entry of a list is reported at once.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from kamera.core.precision import DTYPES as TORCH_DTYPES
from kamera.core.precision import dtype_name
from kamera.discover import CONF_DIR
from kamera.job.lists import list_key
from kamera.job.store import SOURCE, STAMP, Expected, Stamp
from kamera.metrics import VERSION as METRICS_VERSION
from kamera.reuse.plugin import Plugin

DTYPES = {spelling: dtype_name(spelling) for spelling in TORCH_DTYPES}  # model.dtype's spellings → canonical name


class JobError(RuntimeError):
    """A job cannot start, or ended incomplete; the message says why and what to do."""


def _framework(module: str) -> bool:
    """The plugin framework, not a plugin's own code: the plugin base and each kind's base (``kamera.arms.base``
    …)."""
    return module == "kamera.reuse.plugin" or module.endswith(".base")


@functools.cache
def source_digest(cls: type) -> str:
    """sha256 (12 hex) of the source files of a plugin class and of its parent classes in kamera, the framework left
    out (:func:`_framework`): what each record's ``source_digest`` stores, so rows made by other code at the same
    ``version`` are told apart (the runner warns, :mod:`kamera.run.runner`). Code the plugin calls in other modules
    is not covered here; the golden check in the gate (tests/pipeline/test_golden_versions.py) catches its numbers."""
    files = sorted({inspect.getfile(c) for c in cls.__mro__
                    if c.__module__.startswith("kamera.") and not _framework(c.__module__)})
    h = hashlib.sha256()
    for f in files:
        h.update(Path(f).read_bytes())
    return h.hexdigest()[:12]

# ----- arms and probes -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """One entry of ``arms`` or ``probes``: its row label, its knobs (``name`` included), the built plugin.

    Entries are a conf label (``patch_r16``, listed in conf/arm/patch.yaml's ``labels:``), that label with knobs
    overridden (``{patch_r16: {rank: 24}}``, label ``patch_r16[rank=24]``) or an inline plugin
    (``{name: cacheblend, ratio: 0.2}``, label ``cacheblend[ratio=0.2]``); on the command line
    ``'arms=[blind,{patch_r16:{rank:24}},{name:cacheblend,ratio:0.2}]'``.
    """

    label: str
    knobs: dict
    plugin: Plugin

    @property
    def key(self) -> str:
        """The knobs as canonical JSON: with the label, what identifies the plugin's records."""
        return json.dumps(self.knobs, sort_keys=True, separators=(",", ":"), default=str)

    @property
    def stamp(self) -> Stamp:
        """The code versions its records carry (:data:`kamera.job.store.STAMP`): the plugin's ``version`` and the
        row metrics' (:data:`kamera.metrics.VERSION`)."""
        return (self.plugin.version, METRICS_VERSION)

    @property
    def source(self) -> str:
        """The digest of the plugin's own source (:func:`source_digest`)."""
        return source_digest(type(self.plugin))

    @property
    def stamp_columns(self) -> dict[str, int | str]:
        """:attr:`stamp` as the columns a record stores, and the plugin's :attr:`source` beside them."""
        return {**dict(zip(STAMP, self.stamp, strict=True)), SOURCE: self.source}

def expected_of(arms: list[Spec], probes: list[Spec]) -> Expected:
    """What a job asks of each item, as the store matches it."""
    return Expected(tuple((s.label, s.key, s.stamp) for s in arms), tuple((s.label, s.key, s.stamp) for s in probes))

@functools.lru_cache(maxsize=1024)
def _safe_yaml(text: str) -> object:
    """``yaml.safe_load(text)``, parsed once per distinct text (callers copy what they keep): :func:`conf_index` runs
    for every entry of every job (the gate and ``--check`` build thousands), and pure-Python YAML parsing was most of
    that."""
    return yaml.safe_load(text)


@functools.lru_cache(maxsize=1024)
def _omega_yaml(text: str) -> DictConfig | ListConfig:
    """What ``OmegaConf.load`` gives for ``text``, parsed once per distinct text (callers only read it)."""
    return OmegaConf.create(text)


def conf_index(kind: str) -> dict[str, tuple[Path, dict]]:
    """Every label of conf/<kind>, with its file and the knobs it sets over the file's: a file defines its own stem, or,
    when it maps ``labels:`` (a variant family in one file, as lm-evaluation-harness writes variants by ``include:``),
    exactly the labels listed there, each the file's knobs with its own over them. ValueError naming a label two files
    define, or a ``labels:`` that is not a mapping of labels to knob mappings."""
    index: dict[str, tuple[Path, dict]] = {}
    for path in sorted((CONF_DIR / kind).glob("*.yaml")):
        try:
            family = copy.deepcopy((_safe_yaml(path.read_text(encoding="utf-8")) or {}).get("labels")) \
                if path.is_file() else None
        except (yaml.YAMLError, AttributeError):
            family = None  # a malformed file is reported, naming it, when its label is built
        if family is not None and not (isinstance(family, dict) and all(
                isinstance(k, str) and (v is None or isinstance(v, dict)) for k, v in family.items())):
            raise ValueError(f"{path}: labels: must map each label this file defines to its knobs ({{}} for none)")
        for label, knobs in (family or {path.stem: {}}).items():
            if label in index:
                raise ValueError(f"conf/{kind} defines {label!r} twice ({index[label][0].name} and {path.name})")
            index[label] = (path, knobs or {})
    return index


def conf_labels(kind: str) -> list[str]:
    """The conf/<kind> labels available (:func:`conf_index`)."""
    return sorted(conf_index(kind))

def _knob_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

def _spec(kind: str, entry: object) -> Spec:
    from kamera.agent.policies import make_policy
    from kamera.arms import make_arm
    from kamera.probes import make_probe
    from kamera.window.probes import make_probe as make_window_probe

    make = {"arm": make_arm, "probe": make_probe, "window_probe": make_window_probe, "policy": make_policy}[kind]
    if isinstance(entry, str):
        base, overrides = entry, {}
    elif isinstance(entry, dict) and "name" in entry:
        base, overrides = None, dict(entry)
    elif isinstance(entry, dict) and len(entry) == 1 and isinstance(next(iter(entry.values())), dict):
        base, overrides = next(iter(entry.items()))
    else:
        raise ValueError(f"{kind} entry {entry!r} is neither a conf/{kind} label, {{label: {{knob: value}}}} "
                         f"nor {{name: <registered {kind}>, knob: value}}")
    knobs = {}
    if base is not None:
        index = conf_index(kind)
        if base not in index:
            raise ValueError(f"unknown {kind} {base!r}; conf/{kind} has: {', '.join(sorted(index))}")
        path, variant = index[base]
        try:
            knobs = OmegaConf.to_container(_omega_yaml(path.read_text(encoding="utf-8")), resolve=True)
        except yaml.YAMLError as err:  # one line naming the file and where it stops parsing
            mark = getattr(err, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ValueError(f"{path} is not valid YAML{where}: {problem}") from None
        if not isinstance(knobs, dict) or not knobs.get("name"):
            raise ValueError(f"{path} must map `name:` (the registered {kind} it configures) and its knobs")
        knobs.pop("labels", None)
        knobs.update(variant)
    knobs = {**knobs, **overrides}
    plugin = make(knobs.pop("name") if "name" in knobs else "", **knobs)
    version = plugin.version
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"{type(plugin).__name__}.version={version!r}: a {kind}'s code version is an integer >= 1")
    changed = sorted(((k, v) for k, v in overrides.items() if k != "name"), key=lambda kv: kv[0])
    knob_text = "[" + ",".join(f"{k}={_knob_text(v)}" for k, v in changed) + "]" if changed else ""
    label = (base or plugin.name) + knob_text
    return Spec(label, {"name": plugin.name, **plugin.params()}, plugin)

def build_specs(kind: str, entries: object) -> list[Spec]:
    """Every entry of ``arms`` / ``probes`` built; ValueError listing every bad entry at once."""
    entries = OmegaConf.to_container(entries, resolve=True) if OmegaConf.is_config(entries) else entries
    if not isinstance(entries, list):
        raise ValueError(f"{list_key(kind)} must be a list, got {entries!r}")
    specs, problems = [], []
    for entry in entries:
        try:
            specs.append(_spec(kind, entry))
        except (ValueError, TypeError) as err:
            problems.append(str(err))
    labels = [s.label for s in specs]
    twice = sorted({lab for lab in labels if labels.count(lab) > 1})
    if twice:
        problems.append(f"{list_key(kind)} lists {twice} twice")
    if problems:
        raise ValueError("; ".join(problems))
    return specs
