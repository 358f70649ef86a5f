"""One row per (item, plugin), for both item shapes: the job's keys, the item's ids, the plugin's ids, then
its measures; :data:`ROW_COLUMNS` is the one column list every row carries (a window row adds its own
columns after them: ``shape``, ``probe``, ``setting``, ``variant`` … of docs/window.md). The runner stamps
each row, probe record and refusal with :data:`STAMP_COLUMNS` when it stores them: the code versions that
made it, a digest of its plugin's source and the run that wrote it (:mod:`kamera.job.store`)."""

from __future__ import annotations

import pandas as pd
from omegaconf import DictConfig

from kamera.job.spec import DTYPES, Spec
from kamera.job.store import RUN, SOURCE, STAMP

JOB_COLUMNS = ("group", "job_key", "config_key", "model", "family", "attention", "dtype", "bench", "seed")
ITEM_COLUMNS = ("item_id", "subset", "split", "cluster_key")
PLUGIN_COLUMNS = ("arm", "arm_name", "knobs")  # the arm, or a window job's window probe
STAMP_COLUMNS = (*STAMP, SOURCE, RUN)  # the plugin's and the row metrics' versions, its source, the run that wrote it
MEASURE_COLUMNS = (
    "params", "rank", "effective_rank", "effective_rotary_rank", "n_b", "delta", "kl", "kl_blind", "eta",
    "kl_oracle", "flip", "recovered", "pred", "gold", "correct", "n_choices", "bytes", "bytes_frac", "patch_dtype",
    "forwards", "recomputed_tokens", "e90_nb_content", "e90_nb_rotary", "seconds", "shared_seconds",
)
# what the per-sample log reads (kamera.job.samples); an arm row fills them, a window row leaves them null
SAMPLE_LOG_COLUMNS = ("scoring", "input_sha256", "prompt", "choices", "generated")
# a generated answer's measures (docs/metrics.md "Stuck rate"): null for a logit-scored answer, a window row, and rows
# of code before them (read as null, not refused: they generated nothing this measures)
GENERATION_COLUMNS = ("stuck",)
ROW_COLUMNS = (JOB_COLUMNS + ITEM_COLUMNS + PLUGIN_COLUMNS + STAMP_COLUMNS + MEASURE_COLUMNS + SAMPLE_LOG_COLUMNS
               + GENERATION_COLUMNS)


def job_keys(cfg: DictConfig, key: str, ckey: str) -> dict:
    """The job's columns of every row: its group, job and config keys, the model's family and attention kind.
    A checkpoint-backed model's rows also carry its config.json ``model_type`` and the checkpoint directory's name
    (``checkpoint``); ``model=hf`` rows name the model ``model.label`` when given, and their family is the
    checkpoint's model_type."""
    from pathlib import Path

    from kamera.models import checkpoint_model_type, checkpoint_path, entry, own_entry

    e = entry(cfg.model.name)
    extra = {}
    if e.kind == "paper":
        ckpt = checkpoint_path(e.name, cfg.model.path, cfg.paths.models)
        e = own_entry(e.name, ckpt)
        extra = {"model_type": checkpoint_model_type(ckpt), "checkpoint": Path(ckpt).name}
    label = cfg.model.get("label") if e.from_checkpoint else None
    return {
        "group": cfg.group, "job_key": key, "config_key": ckey, "model": label or cfg.model.name, "family": e.family,
        "attention": e.attention, "dtype": DTYPES[cfg.model.dtype], "bench": cfg.bench.name, "seed": cfg.seed,
        **extra,
    }


def row(keys: dict, item: object, spec: Spec, measures: dict, tag: dict | None = None) -> dict:
    """One row: ``keys`` (:func:`job_keys`), the item's ids, ``tag`` (the shape's own marks), the plugin's label,
    name and knobs, then ``measures``; ValueError naming any measure of :data:`MEASURE_COLUMNS` left out (a bug)."""
    out = {**keys, "item_id": item.item_id, "subset": item.subset, "split": item.split,
           "cluster_key": item.cluster_key, **(tag or {}), "arm": spec.label, "arm_name": spec.plugin.name,
           "knobs": spec.key, **measures}
    missing = [c for c in MEASURE_COLUMNS if c not in out]
    if missing:
        raise ValueError(f"a row of {spec.label} on item {item.item_id} lacks the columns {missing}")
    return out


def lacking_columns(path: object, frame: pd.DataFrame) -> str | None:
    """One line when stored rows lack a column of :data:`ROW_COLUMNS` this code writes (rows of older code; a missing
    stamp, per-sample log or generation column is not one: it reads as version 1, or null), else None. A render
    refuses such rows and a job stops on them: ``force=true`` recomputes them."""
    missing = [c for c in ROW_COLUMNS
               if c not in frame and c not in (*STAMP_COLUMNS, *SAMPLE_LOG_COLUMNS, *GENERATION_COLUMNS)] \
        if len(frame) else []
    if not missing:
        return None
    return (f"{path} lacks the column(s) {', '.join(missing)} this code writes (rows of older code): rerun its job "
            "with force=true to recompute them")
