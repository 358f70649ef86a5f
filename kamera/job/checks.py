"""What a job checks before it starts: every key's type and range, the model name and checkpoint directory,
CUDA for ``device=cuda``, the item shape's own checks (benchmark, subsets, options, plugin lists), every
plugin entry, and the benchmark's files and a sample of its media. Each problem is one line; all are
reported together, before any weights load.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import shutil
from pathlib import Path
from typing import get_args

import yaml
from omegaconf import DictConfig, OmegaConf

from kamera.items.selection import Selection
from kamera.job.identity import safetensors_header
from kamera.job.lists import list_key
from kamera.job.shapes import shape_of
from kamera.job.spec import CONF_DIR, DTYPES, JobError, build_specs
from kamera.job.store import results_root
from kamera.knobs import is_int, is_number
from kamera.reuse.context import CanonicalContext

# where an arm job's canonical KV(B|∅) may be prefilled: the values kamera.reuse.context reads (a window job takes
# fewer: kamera.window.shape.WINDOW_CONTEXTS)
CANONICAL_CONTEXTS: tuple[str, ...] = get_args(CanonicalContext)

ATTENTION = ("auto", "sdpa", "eager", "flash_attention_2")  # kamera.models.loading.ATTENTION and "auto"

TRACKING = ("disabled", "offline", "online")

PREFLIGHT_SAMPLE = 2  # items whose media preflight decodes per job


# ----- checks ----------------------------------------------------------------------------------------
def threads_for(threads: object, device: str) -> int | None:
    """Torch CPU threads: ``auto`` = 1 on CPU (tiny models run fastest on one), torch's default on a GPU."""
    if threads == "auto":
        return 1 if device == "cpu" else None
    return threads  # type: ignore[return-value]

def _top_keys(text: str) -> set[str]:
    """The top-level keys of one conf/ file's text (none for a malformed file: it is reported when composed)."""
    try:
        return set(yaml.safe_load(text) or {})
    except (yaml.YAMLError, TypeError):
        return set()


@functools.cache
def read_keys() -> frozenset[str]:
    """The root keys of a job's config kamera reads: conf/config.yaml's own and the config groups its defaults list
    (paths, model, bench …; not conf/arm, whose files are plugin labels), ``hydra``, and every top-level key a
    ``# @package _global_`` file of conf/ sets (an experiment's ``paper``, ``cost``, ``tiny_sweep`` …): a key no
    file of conf/ declares is one no code reads."""
    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text(encoding="utf-8"))["defaults"]
    keys = {"hydra", *(k.removeprefix("optional ") for d in defaults if isinstance(d, dict) for k in d)}
    for path in CONF_DIR.rglob("*.yaml"):
        text = path.read_text(encoding="utf-8")
        if path == CONF_DIR / "config.yaml" or "# @package _global_" in text:
            keys |= _top_keys(text)
    return frozenset(keys - {"defaults"})


def unread_keys(cfg: DictConfig) -> list[str]:
    """One line per root key of ``cfg`` kamera does not read (``+n_item=3``; ``+arm=[blind]``, Hydra's own hint for the
    typo ``arm=[blind]``), naming the closest key it does read: such a key would be accepted and ignored."""
    lines = []
    for key in sorted(set(cfg) - read_keys()):
        value = OmegaConf.select(cfg, key)
        value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        close = difflib.get_close_matches(key, sorted(read_keys()), n=1)
        hint = f" (did you mean {close[0]}? drop the '+' Hydra suggests)" if close else ""
        lines.append(f"{key}={value!r}: kamera reads no root key {key!r}{hint}; conf/config.yaml lists the keys")
    return lines


# the config groups whose keys are checked like the root's: a key no file of the group declares is read by no code
CHECKED_GROUPS = ("model", "paths", "bench", "tracking")
MAX_ITEMS = 10_000_000  # n_items above this is a typo, not a selection (null selects all items)


@functools.cache
def group_keys(group: str) -> frozenset[str]:
    """The keys any conf/<group>/*.yaml file sets (its own top level): what code reads under ``<group>.``."""
    keys = set().union(*(_top_keys(path.read_text(encoding="utf-8")) for path in (CONF_DIR / group).glob("*.yaml")))
    return frozenset(keys - {"defaults"})


def unread_group_keys(cfg: DictConfig) -> list[str]:
    """One line per ``<group>.<key>`` of :data:`CHECKED_GROUPS` that no file of the group declares (``+model.bogus=1``,
    ``+paths.bogus=1``), naming the closest key the group has: such a key would be accepted and ignored."""
    lines = []
    for group in CHECKED_GROUPS:
        node = cfg.get(group)
        if not isinstance(node, DictConfig):
            continue
        known = group_keys(group)
        for key in sorted(set(node) - known):
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {group}.{close[0]}?)" if close else ""
            lines.append(f"{group}.{key}={OmegaConf.select(cfg, f'{group}.{key}')!r}: no conf/{group}/ file has a key "
                         f"{key!r}, so no code reads it{hint}")
    return lines


def added_keys_that_exist(overrides: list[str]) -> list[str]:
    """One line per ``+key=value`` override whose key a conf/ file already declares (``'+arms=[blind]'``,
    ``+model.dtype=bf16``): ``+`` adds a key no file has, so on a declared key it is a misreading (``key=value`` sets
    it, and an experiment's own value may then win or clash)."""
    lines = []
    for o in overrides:
        if not o.startswith("+") or o.startswith("++") or "=" not in o:
            continue
        key = o[1:].split("=", 1)[0]
        group, _, sub = key.partition(".")
        declared = key in read_keys() if not sub else group in CHECKED_GROUPS and sub.split(".")[0] in group_keys(group)
        if declared:
            lines.append(f"{o}: {key} is a key kamera's conf/ declares; drop the '+' ({o[1:]}): '+' adds a key no "
                         "conf/ file has")
    return lines


def outputs_problem(argv: list[str]) -> str | None:
    """Why ``python -m kamera.run <argv>`` cannot create its run folder under the outputs root (``paths.outputs``,
    KAMERA_OUTPUTS, default ``outputs/``; Hydra writes the job's config there before kamera runs): a file in the
    way, read-only, or a full disk; None when it can. Checked before Hydra starts, so it is one line."""
    root = next((a.split("=", 1)[1] for a in argv if a.startswith("paths.outputs=")),
                os.environ.get("KAMERA_OUTPUTS", "outputs"))
    for a in argv:  # an explicit run or sweep folder wins over the root
        if a.startswith(("hydra.run.dir=", "hydra.sweep.dir=")):
            root = a.split("=", 1)[1]
    there = _existing(Path(root))
    fix = "point KAMERA_OUTPUTS (paths.outputs) at a writable folder with free space"
    if not there.is_dir():
        return f"the run folder root {root} cannot be made: {there} is a file; {fix}"
    if not os.access(there, os.W_OK | os.X_OK):
        return f"the run folder root {root} cannot be made: {there} is read-only or not writable by this user; {fix}"
    if shutil.disk_usage(there).free < 1 << 20:
        return f"the run folder root {root} is on a full disk ({there}: under 1 MiB free); {fix}"
    return None


def validate(cfg: DictConfig) -> list[str]:
    """Type and range problems of every key a job reads, one line each (no files, no weights)."""
    import torch

    p = unread_keys(cfg) + unread_group_keys(cfg)

    def need(ok: bool, key: str, what: str) -> None:
        if not ok:
            value = OmegaConf.select(cfg, key)
            p.append(f"{key}={value!r}: {what}")

    need(cfg.n_items is None or (is_int(cfg.n_items) and 1 <= cfg.n_items <= MAX_ITEMS), "n_items",
         f"must be an integer from 1 to {MAX_ITEMS:,} (or null: all items)")
    need(is_int(cfg.seed) and cfg.seed >= 0, "seed", "must be an integer >= 0")
    need(cfg.model.dtype in DTYPES, "model.dtype", f"must be one of {sorted(DTYPES)}")
    need(cfg.model.attn_implementation in ATTENTION, "model.attn_implementation", f"must be one of {list(ATTENTION)}")
    need(cfg.model.path is None or isinstance(cfg.model.path, str), "model.path", "must be a directory path or null")
    need(cfg.canonical_context in CANONICAL_CONTEXTS, "canonical_context", f"must be one of {list(CANONICAL_CONTEXTS)}")
    need(is_number(cfg.eta_floor) and cfg.eta_floor >= 0, "eta_floor", "must be a number >= 0")
    need(is_int(cfg.item_offset) and cfg.item_offset >= 0, "item_offset",
         "must be an integer >= 0 (positions between consecutive items' placements; 0: as laid out)")
    need(is_int(cfg.max_new_tokens) and cfg.max_new_tokens >= 1, "max_new_tokens", "must be an integer >= 1")
    need(cfg.threads in ("auto", None) or (is_int(cfg.threads) and cfg.threads >= 1), "threads",
         "must be auto, null (torch's default) or an integer >= 1")
    need(is_number(cfg.progress_every_s) and cfg.progress_every_s >= 0, "progress_every_s", "must be a number >= 0")
    need(isinstance(cfg.retry_failed, bool), "retry_failed", "must be true or false")
    need(isinstance(cfg.force, bool), "force", "must be true or false")
    need(isinstance(cfg.group, str) and bool(cfg.group) and "/" not in cfg.group and not cfg.group.startswith("."),
         "group", "must be a non-empty name without '/' (results/raw/<group>/)")
    need(cfg.tracking.mode in TRACKING, "tracking.mode", f"must be one of {list(TRACKING)}")
    need(isinstance(cfg.bench.kwargs, DictConfig), "bench.kwargs", "must be a mapping of the benchmark's options")
    for key in ("bench.subset", "bench.split", "bench.root"):
        value = OmegaConf.select(cfg, key)
        need(value is None or isinstance(value, str), key, "must be a string or null")
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

def _model_problems(cfg: DictConfig) -> list[str]:
    """The registry's checks of the model name and checkpoint, then the checkpoint's files (:func:`checkpoint_problems`:
    a paper checkpoint's directory, a toy model's shipped weights)."""
    from kamera.models import checkpoint_path, entry, model_problems

    problems = model_problems(cfg.model.name, cfg.model.path, cfg.paths.models, chat=cfg.model.get("chat", "template"))
    if problems:
        return problems
    e = entry(cfg.model.name)
    if e.kind == "paper":
        ckpt = checkpoint_path(e.name, cfg.model.path, cfg.paths.models)
        return checkpoint_problems(ckpt) or fit_problems(cfg.model.name, ckpt)
    if e.kind == "toy" and e.weights:
        from kamera.toy.digests import weight_problems

        folder = Path(__file__).resolve().parents[1] / e.weights  # in kamera/
        return checkpoint_problems(folder, tokenizer=False) or weight_problems(folder)
    return []


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "vocab.json")  # any one of them
SHARD_NAME = re.compile(r".+-\d{5}-of-\d{5}\.safetensors")  # how save_pretrained names the shards of sharded weights


def checkpoint_problems(ckpt: Path, tokenizer: bool = True) -> list[str]:
    """What is wrong with a checkpoint directory's files, found by reading its small files and the safetensors
    headers, never the weights: config.json must parse as a JSON object; every ``*.safetensors.index.json`` must
    parse and every shard it names must exist and hold the tensors the index assigns it, and sharded weights
    (``model-00001-of-00002.safetensors`` …) need one; every ``.safetensors`` file's header must parse and its
    tensors must fit in the file (a truncated download); and (``tokenizer``) beside
    weight files one of :data:`TOKENIZER_FILES` must be there (a directory of config.json alone, as tests stub a
    checkpoint, is not checked for one). A GGUF checkpoint (a ``.gguf`` file, or a directory holding one) carries
    its config and tokenizer inside and is read by its loader; only a directory's safetensors files are checked."""
    if not ckpt.is_dir():
        return []
    gguf, p = any(ckpt.glob("*.gguf")), []
    try:
        config = json.loads((ckpt / "config.json").read_text())
        if not isinstance(config, dict):
            p.append(f"{ckpt / 'config.json'} is not a JSON object")
    except (OSError, ValueError) as err:
        if not gguf:
            p.append(f"{ckpt / 'config.json'} does not parse: {type(err).__name__}: {err}")
    headers = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        header, why = safetensors_tensors(f)
        if why:
            p.append(f"{f}: {why}; re-download or rebuild the checkpoint")
        headers[f.name] = header
    indexes = sorted(ckpt.glob("*.safetensors.index.json"))
    sharded = sorted(f for f in headers if SHARD_NAME.fullmatch(f))
    if sharded and not indexes:
        p.append(f"{ckpt} holds sharded weights ({sharded[0]}, {len(sharded)} file(s)) but no "
                 "model.safetensors.index.json, the map of tensors to shards a loader reads; re-download it")
    for index in indexes:
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            owners = {str(t): str(f) for t, f in weight_map.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            p.append(f"{index} does not parse as a weight index ({type(err).__name__}: {err})")
            continue
        missing = sorted({f for f in owners.values() if f not in headers})
        if missing:
            p.append(f"{index} names shard(s) {missing} that are not in {ckpt}")
        lost = sorted(t for t, f in owners.items() if headers.get(f) is not None and t not in headers[f])
        if lost:
            p.append(f"{index} assigns {len(lost)} tensor(s) to shards that do not hold them (e.g. {lost[0]!r})")
    weights = bool(headers) or any(f.suffix in (".bin", ".pt", ".pth") for f in ckpt.iterdir())
    if tokenizer and weights and not gguf and not any((ckpt / t).is_file() for t in TOKENIZER_FILES):
        p.append(f"{ckpt} has no tokenizer file (one of {', '.join(TOKENIZER_FILES)})")
    return p


def fit_problems(name: str, ckpt: Path) -> list[str]:
    """Whether a sound checkpoint directory's weights are the ones its config.json describes (issue 40, items a, b):
    every tensor of its safetensors headers against the model class built from the config on the meta device
    (:func:`kamera.models.weights.weight_problems`: missing, unexpected and misshapen tensors, one line each). A GGUF
    file, a directory without safetensors weights and a model with a loader of its own are not compared."""
    if not ckpt.is_dir():
        return []
    files = sorted(ckpt.glob("*.safetensors"))
    stamp = tuple((f.name, st.st_size, st.st_mtime_ns) for f in [ckpt / "config.json", *files] if (st := f.stat()))
    return list(_fit_problems(name, ckpt, stamp)) if files else []


@functools.lru_cache(maxsize=32)
def _fit_problems(name: str, ckpt: Path, stamp: tuple) -> tuple[str, ...]:
    """:func:`fit_problems` once per checkpoint state (``stamp``: config.json's and each weight file's size and
    mtime), so a sweep's jobs on one checkpoint compare its tensors once."""
    from kamera.models import own_entry
    from kamera.models.weights import weight_problems

    tensors: dict[str, list[int]] = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        tensors.update(safetensors_tensors(f)[0] or {})
    return tuple(weight_problems(own_entry(name, ckpt), ckpt, tensors)) if tensors else ()


def safetensors_tensors(path: Path) -> tuple[dict[str, list[int]] | None, str | None]:
    """(tensor name → shape, None) of a .safetensors file whose header (:func:`kamera.job.identity.safetensors_header`)
    parses and whose tensors end inside the file, else (None, why not)."""
    try:
        raw = safetensors_header(path)
    except ValueError as err:
        return None, str(err)
    except OSError as err:
        return None, f"its header does not parse ({type(err).__name__}: {err})"
    try:
        header = json.loads(raw)
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        end = max((int(v["data_offsets"][1]) for v in tensors.values()), default=0)
        shapes = {k: [int(n) for n in v["shape"]] for k, v in tensors.items()}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        return None, f"its header does not parse ({type(err).__name__}: {err})"
    if 8 + len(raw) + end > path.stat().st_size:
        return None, f"truncated: its tensors end at byte {8 + len(raw) + end}, the file has {path.stat().st_size}"
    return shapes, None


def _image_problems(cfg: DictConfig, items: list) -> list[str]:
    """A text-only model on a benchmark whose (sampled) items hold images or video: one line naming both."""
    from kamera.models import image_problems

    # arm items' span builders (a window entry builds its spans with the model); called only for a text-only model
    spans = [item.spans for item in items if callable(getattr(item, "spans", None))]
    return image_problems(cfg.model.name, cfg.model.path, cfg.bench.name, spans)


def _existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (what a ``mkdir -p`` of it would start from)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def results_problems(cfg: DictConfig) -> list[str]:
    """A results root (``paths.results``, KAMERA_RESULTS) that cannot hold a group folder: it, or the nearest part of
    its path that exists, is a file. (A read-only root is checked when a job has something to write,
    :func:`unwritable`: a complete job on read-only storage has nothing to run.)"""
    there = _existing(results_root(cfg) / cfg.group)
    if not there.is_dir():
        return [f"paths.results={cfg.paths.results}: {there} is a file, not a folder; point paths.results "
                "(KAMERA_RESULTS) at a folder"]
    return []


def unwritable(folder: Path) -> str | None:
    """Why a job cannot write its shard under ``folder`` (the nearest existing part of the path is read-only or not
    ours), or None."""
    there = _existing(folder)
    if os.access(there, os.W_OK | os.X_OK):
        return None
    where = f"{folder} is" if there == Path(os.path.abspath(folder)) else f"{folder} cannot be made: {there} is"
    return f"the results folder {where} read-only or not writable by this user; point paths.results (KAMERA_RESULTS) " \
           "at a writable folder"


def defect_problems(cfg: DictConfig, selection: Selection) -> list[str]:
    """The data defects a selection met (rows that do not parse, media that do not decode), one line each: a job
    with any cannot complete, so it stops at selection, before weights load."""
    return [f"{cfg.bench.name}: data defect, {s['item_id']} ({s['stage']}): {s['reason']}" for s in selection.defects]


def preflight(cfg: DictConfig, sample: int = PREFLIGHT_SAMPLE) -> list[str]:
    """Every problem that would stop this job, found without loading weights or running a forward.

    The benchmark is read as the job will read it, and the media of its first ``sample`` selected
    items are decoded (data defects there are problems: the job would skip or fail on them)."""
    shape = shape_of(cfg)
    problems = validate(cfg)
    if cfg.item_offset != 0 and not shape.places_items:
        problems.append(f"item_offset={cfg.item_offset!r}: places an arm job's items; a window, agent or engine "
                        f"job's items (bench={cfg.bench.name}) stay where their benchmark puts them")
    problems += results_problems(cfg) if isinstance(cfg.group, str) and cfg.group else []
    problems += _model_problems(cfg)
    bench = shape.problems(cfg)
    problems += bench
    built = {}
    for kind in shape.kinds:
        try:
            built[kind] = build_specs(kind, cfg[list_key(kind)])
        except ValueError as err:
            problems.append(str(err))
    problems += shape.plugin_problems(cfg, built)
    selection_keys = ("n_items=", "seed=", "bench.")  # what reading the benchmark depends on
    readable = not bench and not any(p.startswith(selection_keys) for p in problems)
    if readable and not shape.selects_from_model(cfg):
        try:
            chosen = shape.select(cfg, sample if cfg.n_items is None else min(sample, cfg.n_items))
        except JobError as err:
            problems.append(str(err))
        else:
            problems += defect_problems(cfg, chosen)
            if not chosen.items:
                problems.append(f"{cfg.bench.name}: no item can be selected ({chosen.report})")
            problems += _image_problems(cfg, chosen.items)
    return problems
