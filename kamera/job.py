"""What a job is: its checked keys, its arms and probes, the items it selects and its identity.

A job is one model × one benchmark selection × a list of arms (and probes). Everything that can be
checked without weights is checked by :func:`preflight`: every key's type and range, the model
name and checkpoint directory, CUDA for ``device=cuda``, the benchmark's files and a sample of its
media, every arm and probe entry. Each problem is one line; all are reported together.

A job's identity, the key of its results shard (:mod:`kamera.store`):

    config      model name, dtype (canonical spelling), benchmark name / subsets / split / kwargs,
                n_items, seed, canonical_context, eta_floor, max_new_tokens (a pure function of the
                composed config: status and renderers find a job's shard by it without data or weights)
    checkpoint  a fingerprint of the checkpoint actually loaded: for a paper model its config.json,
                tokenizer / processor files and the safetensors headers (never the weight bytes) of
                the directory resolved from model.path or KAMERA_MODELS; for a tiny model the config
                it is built from; for a toy model the hash of its shipped weights
    data        a fingerprint of the data actually read: the annotation files the loader opened and
                the ids of the selected items

so a second copy of a benchmark, a repaired medium that changes the selection, or another
checkpoint directory is a different job, never a silent reuse, while byte-identical copies share
results. Arms and probes are not part of it (rows are keyed by item and arm within the shard).

A job has one of two item shapes, decided by its benchmark: ``[prefix · A… · B · query]`` items × arms
(and probes), or window items × window probes (a window benchmark, :mod:`kamera.window.job`, whose
hooks are called here where the shapes differ: checks, plugin lists, selection, the ``bench`` part of
the identity).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from kamera.items import EvalItem, from_chunked, toy_items
from kamera.registry import Plugin
from kamera.store import Expected, digest
from kamera.sweep import CONF_DIR

if TYPE_CHECKING:
    from kamera.window.bench import WindowEntry

# Benchmarks whose items come from the model itself (the toy task is the toy model's own task).
MODEL_ITEM_SOURCES = {"binding": toy_items}
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}
CANONICAL_CONTEXTS = ("prefix", "native", "none")
ATTENTION = ("auto", "sdpa", "eager", "flash_attention_2")  # kamera.models.loading.ATTENTION and "auto"
TRACKING = ("disabled", "offline", "online")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
PREFLIGHT_SAMPLE = 2  # items whose media preflight decodes per job


class JobError(RuntimeError):
    """A job cannot start, or ended incomplete; the message says why and what to do."""


# ----- arms and probes -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """One entry of ``arms`` or ``probes``: its row label, its knobs (``name`` included), the built plugin.

    Entries are a conf file's label (``patch_r16`` → conf/arm/patch_r16.yaml), that file with knobs
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


def expected_of(arms: list[Spec], probes: list[Spec]) -> Expected:
    """What a job asks of each item, as the store matches it."""
    return Expected(tuple((s.label, s.key) for s in arms), tuple((s.label, s.key) for s in probes))


def conf_labels(kind: str) -> list[str]:
    """The conf/<kind>/<label>.yaml files available."""
    return sorted(p.stem for p in (CONF_DIR / kind).glob("*.yaml"))


def _knob_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _window():
    """:mod:`kamera.window.job`, the window item shape's hooks (imported on use: it imports this module)."""
    from kamera.window import job

    return job


def _spec(kind: str, entry: object) -> Spec:
    from kamera.arms import make_arm
    from kamera.probes import make_probe
    from kamera.window.probes import make_probe as make_window_probe

    make = {"arm": make_arm, "probe": make_probe, "window_probe": make_window_probe}[kind]
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
        path = CONF_DIR / kind / f"{base}.yaml"
        if not path.is_file():
            raise ValueError(f"unknown {kind} {base!r}; conf/{kind} has: {', '.join(conf_labels(kind))}")
        knobs = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        if not isinstance(knobs, dict) or not knobs.get("name"):
            raise ValueError(f"{path} must map `name:` (the registered {kind} it configures) and its knobs")
    knobs = {**knobs, **overrides}
    plugin = make(knobs.pop("name") if "name" in knobs else "", **knobs)
    changed = sorted(((k, v) for k, v in overrides.items() if k != "name"), key=lambda kv: kv[0])
    label = (base or plugin.name) + ("[" + ",".join(f"{k}={_knob_text(v)}" for k, v in changed) + "]" if changed else "")
    return Spec(label, {"name": plugin.name, **plugin.params()}, plugin)


def job_specs(cfg: DictConfig) -> tuple[list[Spec], list[Spec]]:
    """The plugins a job runs per item: (arms, probes), or (window probes, []) for a window job (its rows are
    keyed by the window probe as arm rows are by the arm)."""
    if _window().is_window(cfg):
        return build_specs("window_probe", cfg.window_probes), []
    return build_specs("arm", cfg.arms), build_specs("probe", cfg.probes)


def build_specs(kind: str, entries: object) -> list[Spec]:
    """Every entry of ``arms`` / ``probes`` built; ValueError listing every bad entry at once."""
    entries = OmegaConf.to_container(entries, resolve=True) if OmegaConf.is_config(entries) else entries
    if not isinstance(entries, list):
        raise ValueError(f"{kind}s must be a list, got {entries!r}")
    specs, problems = [], []
    for entry in entries:
        try:
            specs.append(_spec(kind, entry))
        except (ValueError, TypeError) as err:
            problems.append(str(err))
    labels = [s.label for s in specs]
    twice = sorted({lab for lab in labels if labels.count(lab) > 1})
    if twice:
        problems.append(f"{kind}s lists {twice} twice")
    if problems:
        raise ValueError("; ".join(problems))
    return specs


# ----- checks ----------------------------------------------------------------------------------------
def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def resolve_device(device: str) -> str:
    """The device a job loads on (:func:`kamera.models.loading.resolve_device`): ``cpu``, ``cuda[:i]``, or
    ``auto`` kept only where CUDA is visible (the model is then spread over the node's GPUs), else ``cpu``."""
    from kamera.models.loading import resolve_device as resolve

    return resolve(device)


def threads_for(threads: object, device: str) -> int | None:
    """Torch CPU threads: ``auto`` = 1 on CPU (tiny models run fastest on one), torch's default on a GPU."""
    if threads == "auto":
        return 1 if device == "cpu" else None
    return threads  # type: ignore[return-value]


def validate(cfg: DictConfig) -> list[str]:
    """Type and range problems of every key a job reads, one line each (no files, no weights)."""
    import torch

    p = []

    def need(ok: bool, key: str, what: str) -> None:
        if not ok:
            value = OmegaConf.select(cfg, key)
            p.append(f"{key}={value!r}: {what}")

    need(cfg.n_items is None or (_is_int(cfg.n_items) and cfg.n_items >= 1), "n_items", "must be an integer >= 1 (or null: all)")
    need(_is_int(cfg.seed) and cfg.seed >= 0, "seed", "must be an integer >= 0")
    need(cfg.model.dtype in DTYPES, "model.dtype", f"must be one of {sorted(DTYPES)}")
    need(cfg.model.attn_implementation in ATTENTION, "model.attn_implementation", f"must be one of {list(ATTENTION)}")
    need(cfg.model.path is None or isinstance(cfg.model.path, str), "model.path", "must be a directory path or null")
    need(cfg.canonical_context in CANONICAL_CONTEXTS, "canonical_context", f"must be one of {list(CANONICAL_CONTEXTS)}")
    need(_is_number(cfg.eta_floor) and cfg.eta_floor >= 0, "eta_floor", "must be a number >= 0")
    need(_is_int(cfg.max_new_tokens) and cfg.max_new_tokens >= 1, "max_new_tokens", "must be an integer >= 1")
    need(cfg.threads in ("auto", None) or (_is_int(cfg.threads) and cfg.threads >= 1), "threads",
         "must be auto, null (torch's default) or an integer >= 1")
    need(_is_number(cfg.progress_every_s) and cfg.progress_every_s >= 0, "progress_every_s", "must be a number >= 0")
    need(isinstance(cfg.retry_failed, bool), "retry_failed", "must be true or false")
    need(isinstance(cfg.group, str) and bool(cfg.group) and "/" not in cfg.group and not cfg.group.startswith("."),
         "group", "must be a non-empty name without '/' (results/raw/<group>/)")
    need(cfg.tracking.mode in TRACKING, "tracking.mode", f"must be one of {list(TRACKING)}")
    need(isinstance(cfg.bench.kwargs, DictConfig), "bench.kwargs", "must be a mapping of the benchmark's options")
    for key in ("bench.subset", "bench.split", "bench.root"):
        need(OmegaConf.select(cfg, key) is None or isinstance(OmegaConf.select(cfg, key), str), key, "must be a string or null")
    device = cfg.device
    if not isinstance(device, str) or not (device in ("auto", "cpu") or device.split(":")[0] == "cuda"):
        p.append(f"device={device!r}: must be auto, cpu, cuda or cuda:<index>")
    elif device.startswith("cuda"):
        if not torch.cuda.is_available():
            p.append(f"device={device}: CUDA is not available here (torch {torch.__version__} "
                     f"{'without CUDA' if torch.version.cuda is None else 'sees no GPU'}); use device=auto or cpu")
        elif ":" in device and not (device[5:].isdigit() and int(device[5:]) < torch.cuda.device_count()):
            p.append(f"device={device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return p


def bench_root(cfg: DictConfig) -> Path | None:
    """The benchmark directory: bench.root, else <paths.data>/<the benchmark's directory name>."""
    from kamera.data import get_benchmark

    if cfg.bench.root:
        return Path(cfg.bench.root)
    spec = _window().window_bench(cfg) or get_benchmark(cfg.bench.name)
    return Path(cfg.paths.data) / spec.dir_name if cfg.paths.data and spec.dir_name else None


def _bench_problems(cfg: DictConfig) -> list[str]:
    """Benchmark name, subsets, split and kwargs, checked against the loader's own signature."""
    from kamera.data import get_benchmark

    if _window().is_window(cfg):
        return []  # kamera.window.job.problems
    if cfg.bench.name in MODEL_ITEM_SOURCES:
        ok = cfg.model.name.startswith("toy_")
        return [] if ok else [f"bench=binding needs a toy model (toy_binding, toy_binding_text), not {cfg.model.name}"]
    try:
        spec = get_benchmark(cfg.bench.name)
        spec.resolve_subsets(cfg.bench.subset)
        spec.resolve_split(cfg.bench.split)
    except ValueError as err:
        return [str(err)]
    if not isinstance(cfg.bench.kwargs, DictConfig):
        return []  # validate() reports it
    takes = [n for n, prm in inspect.signature(spec.rows).parameters.items() if prm.kind is prm.KEYWORD_ONLY]
    bad = sorted(set(cfg.bench.kwargs) - set(takes))
    return [f"bench.kwargs {bad} are not options of {spec.name}; it takes {takes}"] if bad else []


def _model_problems(cfg: DictConfig) -> list[str]:
    from kamera.models.registry import model_problems

    return model_problems(cfg.model.name, cfg.model.path, cfg.paths.models)


def preflight(cfg: DictConfig, sample: int = PREFLIGHT_SAMPLE) -> list[str]:
    """Every problem that would stop this job, found without loading weights or running a forward.

    The benchmark is read as the job will read it, and the media of its first ``sample`` selected
    items are decoded (data defects there are problems: the job would skip or fail on them)."""
    problems = validate(cfg)
    problems += _model_problems(cfg)
    bench = _bench_problems(cfg)
    problems += bench
    window = _window().problems(cfg)  # the item shape: which plugin lists and keys the job uses
    problems += window
    for kind in ("window_probe",) if _window().is_window(cfg) else ("arm", "probe"):
        try:
            build_specs(kind, cfg[f"{kind}s"])
        except ValueError as err:
            problems.append(str(err))
    selection_keys = ("n_items=", "seed=", "bench.")  # what reading the benchmark depends on
    readable = not bench and not window and not any(p.startswith(selection_keys) for p in problems)
    if readable and cfg.bench.name not in MODEL_ITEM_SOURCES:
        try:
            chosen = select(cfg, n_items=sample if cfg.n_items is None else min(sample, cfg.n_items))
        except JobError as err:
            problems.append(str(err))
        else:
            problems += [f"{cfg.bench.name}: data defect, {s['item_id']} ({s['stage']}): {s['reason']}"
                         for s in chosen.defects]
            if not chosen.items:
                problems.append(f"{cfg.bench.name}: no item can be selected ({chosen.report})")
    return problems


# ----- selection and identity ----------------------------------------------------------------------
@dataclass
class Selection:
    """The items a job evaluates, the annotation files they came from and what the loader skipped."""

    items: list[EvalItem] | list[WindowEntry]  # a window job's items are window entries
    root: Path | None = None
    files: list[Path] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    n_requested: int | None = None
    report: str = ""

    @property
    def ids(self) -> list[str]:
        return [it.item_id for it in self.items]

    @property
    def defects(self) -> list[dict]:
        """Rows skipped for bad data (unparseable, malformed, media that does not decode), not by the recipe."""
        return [s for s in self.skipped if s["stage"] in ("row", "build")]

    def fingerprint(self) -> dict:
        """sha256 of each annotation file read (relative to the benchmark root) and of the selected ids."""
        files = {}
        for f in sorted(set(self.files)):
            rel = f.relative_to(self.root) if self.root and f.is_relative_to(self.root) else f
            files[str(rel)] = file_digest(f)
        return {"files": files, "items": digest(self.ids)}

    def record(self) -> dict:
        """What a shard stores about its selection."""
        return {"item_ids": self.ids, "n_requested": self.n_requested, "skipped": self.skipped,
                "root": str(self.root) if self.root else None, "report": self.report}


def select(cfg: DictConfig, adapter=None, n_items: int | None = -1) -> Selection:
    """The job's items, chosen deterministically by the benchmark loader (or the toy model's task).

    Files are read and the selected items' images decoded (rows that fail are skipped with their
    reason: :attr:`Selection.defects`); no model is needed except for the toy task. There is no
    length filter here: an item too long for the model fails when it is encoded, with that reason,
    so the selection does not depend on the model and each item is encoded once."""
    n = cfg.n_items if n_items == -1 else n_items
    if _window().is_window(cfg):
        return _window().select(cfg, n)
    if cfg.bench.name in MODEL_ITEM_SOURCES:
        if adapter is None:
            raise ValueError(f"bench={cfg.bench.name} draws its items from the model; pass the adapter")
        items = MODEL_ITEM_SOURCES[cfg.bench.name](adapter, n_items=n, seed=cfg.seed, subset=cfg.bench.subset)
        return Selection(items, n_requested=n, report=f"{len(items)} items of the toy task")
    chosen = read_benchmark(cfg.bench.name, bench_root(cfg), cfg, n, OmegaConf.to_container(cfg.bench.kwargs, resolve=True))
    chosen.items = [from_chunked(it) for it in chosen.items]
    return chosen


def read_benchmark(name: str, root: Path | None, cfg: DictConfig, n: int | None, kwargs: dict) -> Selection:
    """The loader's selection of benchmark ``name`` (its ``ChunkedItem``s, the annotation files it read, what
    it skipped and why); JobError naming missing or unreadable data."""
    from kamera.data import BenchmarkDataMissing, load_items
    from kamera.data.base import recording_reads

    try:
        with recording_reads() as files:
            loaded = load_items(name, root=root, subset=cfg.bench.subset, split=cfg.bench.split, n_items=n,
                                seed=cfg.seed, **kwargs)
    except BenchmarkDataMissing as err:
        raise JobError(str(err)) from None
    except (ValueError, TypeError, OSError) as err:
        where = f" under {root}" if root else ""
        raise JobError(f"{cfg.bench.name}: cannot read the benchmark{where}: {err}") from None
    r = loaded.report
    skipped = [{"item_id": s.item_id, "reason": s.reason, "stage": s.stage} for s in r.skipped]
    return Selection(list(loaded), r.root, list(files), skipped, n, r.summary())


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    """sha256 (16 hex) of a file's bytes, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()[:16]


def safetensors_header(path: Path) -> bytes:
    """The JSON header of a .safetensors file (tensor names, dtypes, shapes, offsets; no weights)."""
    with open(path, "rb") as fh:
        size = struct.unpack("<Q", fh.read(8))[0]
        return fh.read(size)


def checkpoint_fingerprint(cfg: DictConfig) -> str:
    """What identifies the model a job loads (see the module docstring); weights are never read whole."""
    from kamera.models import checkpoint_path, entry
    from kamera.models.registry import weights_fingerprint

    e = entry(cfg.model.name)
    if e.kind == "toy":
        return f"toy:{weights_fingerprint(e.name)}"
    if e.kind == "tiny":
        config = e.tiny_config().to_dict()
        config.pop("transformers_version", None)
        return f"tiny:{digest(config)}"
    ckpt = checkpoint_path(e.name, cfg.model.path, cfg.paths.models)
    h = hashlib.sha256()
    for f in sorted(p for p in ckpt.iterdir() if p.is_file()):
        h.update(f.name.encode())
        if f.suffix == ".safetensors":
            h.update(safetensors_header(f))
        elif f.suffix in WEIGHT_SUFFIXES:
            h.update(str(f.stat().st_size).encode())
        else:  # config.json, weight index, tokenizer and processor files: small, read whole
            h.update(file_digest(f).encode())
    return f"checkpoint:{h.hexdigest()[:16]}"


def config_identity(cfg: DictConfig) -> dict:
    """The config keys that define a job's numbers (operational keys such as paths and device left out)."""
    from kamera.data import get_benchmark

    subset, split = cfg.bench.subset, cfg.bench.split
    window = _window().is_window(cfg)
    if cfg.bench.name not in MODEL_ITEM_SOURCES and not window:  # spell the defaults out: null = the default list
        spec = get_benchmark(cfg.bench.name)
        subset, split = ",".join(spec.resolve_subsets(subset)), spec.resolve_split(split)
    bench = _window().bench_identity(cfg) if window else {
        "name": cfg.bench.name, "subset": subset, "split": split,
        "kwargs": OmegaConf.to_container(cfg.bench.kwargs, resolve=True)}
    return {
        **({"shape": "window"} if window else {}),  # a window job's key never equals an arm job's
        "model": {"name": cfg.model.name, "dtype": DTYPES[cfg.model.dtype]},
        "bench": bench,
        "n_items": cfg.n_items,
        "seed": cfg.seed,
        "canonical_context": cfg.canonical_context,
        "eta_floor": cfg.eta_floor,
        "max_new_tokens": cfg.max_new_tokens,
    }


def config_key(cfg: DictConfig) -> str:
    return digest(config_identity(cfg))


def identity(cfg: DictConfig, selection: Selection) -> dict:
    """The full identity of a job: config, checkpoint and data fingerprints (the shard's key is its digest)."""
    return {"config": config_identity(cfg), "checkpoint": checkpoint_fingerprint(cfg), "data": selection.fingerprint()}


def results_root(cfg: DictConfig) -> Path:
    """Where shards go: paths.results (KAMERA_RESULTS, else results/raw), relative to the working directory."""
    return Path(os.path.expanduser(cfg.paths.results))
