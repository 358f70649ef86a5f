"""What a job checks before it starts: every key's type and range, the model name and checkpoint directory,
CUDA for ``device=cuda``, the item shape's own checks (benchmark, subsets, options, plugin lists), every
plugin entry, and the benchmark's files and a sample of its media. Each problem is one line; all are
reported together, before any weights load.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from kamera.items.selection import Selection
from kamera.job.shape import shape_of
from kamera.job.spec import DTYPES, JobError, build_specs
from kamera.knobs import is_int, is_number

CANONICAL_CONTEXTS = ("prefix", "native", "none")

ATTENTION = ("auto", "sdpa", "eager", "flash_attention_2")  # kamera.models.loading.ATTENTION and "auto"

TRACKING = ("disabled", "offline", "online")

PREFLIGHT_SAMPLE = 2  # items whose media preflight decodes per job


# ----- checks ----------------------------------------------------------------------------------------
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

    need(cfg.n_items is None or (is_int(cfg.n_items) and cfg.n_items >= 1), "n_items", "must be an integer >= 1 (or null: all)")
    need(is_int(cfg.seed) and cfg.seed >= 0, "seed", "must be an integer >= 0")
    need(cfg.model.dtype in DTYPES, "model.dtype", f"must be one of {sorted(DTYPES)}")
    need(cfg.model.attn_implementation in ATTENTION, "model.attn_implementation", f"must be one of {list(ATTENTION)}")
    need(cfg.model.path is None or isinstance(cfg.model.path, str), "model.path", "must be a directory path or null")
    need(cfg.canonical_context in CANONICAL_CONTEXTS, "canonical_context", f"must be one of {list(CANONICAL_CONTEXTS)}")
    need(is_number(cfg.eta_floor) and cfg.eta_floor >= 0, "eta_floor", "must be a number >= 0")
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

def _model_problems(cfg: DictConfig) -> list[str]:
    from kamera.models.registry import model_problems

    return model_problems(cfg.model.name, cfg.model.path, cfg.paths.models)


def _image_problems(cfg: DictConfig, items: list) -> list[str]:
    """A text-only model on a benchmark whose (sampled) items hold images or video: one line naming both."""
    from kamera.models.registry import image_problems

    # arm items' span builders (a window entry builds its spans with the model); called only for a text-only model
    spans = [item.spans for item in items if callable(getattr(item, "spans", None))]
    return image_problems(cfg.model.name, cfg.model.path, cfg.bench.name, spans)


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
    problems += _model_problems(cfg)
    bench = shape.problems(cfg)
    problems += bench
    built = {}
    for kind in shape.kinds:
        try:
            built[kind] = build_specs(kind, cfg[f"{kind}s"])
        except ValueError as err:
            problems.append(str(err))
    problems += shape.plugin_problems(cfg, built)
    if set(shape.kinds) == {"arm", "probe"} and built.keys() == {"arm", "probe"} and not any(built.values()):
        problems.append("arms=[] and probes=[]: a job needs at least one arm or probe (conf/arm, conf/probe)")
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
