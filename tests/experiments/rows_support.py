"""Hand-built rows and probe records with the runner's real columns, for the renderers' golden tests."""

from __future__ import annotations

import json
import math

import pandas as pd

from kamera.job.rows import ROW_COLUMNS

ATTENTION = {"kimi_vl_a3b": "MLA", "tiny_kimi": "MLA", "deepseek_vl_7b": "MHA", "llava_1_5_7b": "MHA",
             "phi3_5_vision": "MHA", "tiny_llava": "MHA"}
ETA_FLOOR = 1e-4
# Columns a renderer joins from each row's job config (experiments.common.with_job_columns).
JOB_COLUMNS = {"canonical_context", "eta_floor"}


def arm_knobs(arm: str) -> tuple[str, float, dict]:
    """(arm_name, rank, params) of a conf/arm label, as the runner would record them."""
    if arm.startswith("patch_r"):
        rank = int(arm.removeprefix("patch_r"))
        return "patch", float(rank), {"rank": rank, "layers": "all", "granularity": "layer"}
    if arm.startswith("shallow_reprefill"):
        return "shallow_reprefill", math.nan, {}
    for name in ("oracle_topp", "first_k", "quest", "shadowkv", "oracle4d", "reprefill", "blind", "cacheblend",
                 "mpic", "epic", "vlcache", "sink", "cross_mass", "nystrom"):
        if arm.startswith(name):
            return name, math.nan, {}
    raise ValueError(f"no arm name for {arm!r}")


def row(model: str, item: str, arm: str, kl: float = 0.0, kl_blind: float = 1.0, **values) -> dict:
    """One row: every runner column, η derived from the two KLs (NaN below the floor) unless given."""
    name, rank, params = arm_knobs(arm)
    params = {**params, **values.pop("params", {})}
    eta = math.nan if kl_blind <= ETA_FLOOR else 1.0 - kl / kl_blind
    base = {
        "group": "golden", "job_key": f"job-{model}", "config_key": f"cfg-{model}", "model": model,
        "family": model, "attention": ATTENTION.get(model, "GQA"), "dtype": "bfloat16", "bench": "mmlongbench_doc",
        "seed": 0, "item_id": item, "subset": "two_page", "split": "train", "cluster_key": None, "arm": arm,
        "arm_name": name, "knobs": json.dumps({"name": name}), "params": json.dumps(params, sort_keys=True),
        "rank": rank, "effective_rank": rank, "effective_rotary_rank": rank, "n_b": 480, "delta": 600,
        "kl": kl, "kl_blind": kl_blind, "eta": eta, "kl_oracle": math.nan, "flip": False, "recovered": True,
        "pred": "A", "gold": "A", "correct": 1.0, "n_choices": 4, "bytes": 0, "bytes_frac": 0.0, "patch_dtype": "",
        "forwards": 0, "recomputed_tokens": 0, "e90_nb_content": math.nan, "e90_nb_rotary": math.nan,
        "seconds": 0.01, "shared_seconds": 0.1,
    }
    unknown = set(values) - set(base) - JOB_COLUMNS
    if unknown:
        raise ValueError(f"not row columns: {sorted(unknown)}")
    return {**base, **values}


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS) + [c for c in rows[0] if c not in ROW_COLUMNS])


def probe_record(model: str, item: str, probe: str, **values) -> dict:
    """One probe record with the runner's key columns."""
    return {"group": "golden", "job_key": f"job-{model}", "config_key": f"cfg-{model}", "model": model,
            "family": model, "attention": ATTENTION.get(model, "GQA"), "dtype": "bfloat16",
            "bench": "mmlongbench_doc", "seed": 0, "item_id": item, "subset": "two_page", "probe": probe,
            "knobs": json.dumps({"name": probe}), **values}
