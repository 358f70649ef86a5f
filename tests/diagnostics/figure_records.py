"""Small fixed sets of rows and probe records for the Figs. 3, 4, 8, 11, 12 golden tests.

Values are closed-form functions of their keys (no randomness), and each set carries the edge cases a
renderer must survive: a layer with Δ = 0, a model with one item, a panel with no data.
"""

from __future__ import annotations

import json
import math

import pandas as pd

KEYS = {"group": "golden", "job_key": "k", "config_key": "c", "family": "f", "attention": "GQA", "bench": "videomme",
        "seed": 0, "subset": "s"}


def probe_frame(records: list[dict], name: str, label: str | None = None, **knobs) -> pd.DataFrame:
    """Records as the store holds them: the job keys, the probe's label and knobs JSON."""
    key = json.dumps({"name": name, **knobs}, sort_keys=True, separators=(",", ":"))
    return pd.DataFrame([{**KEYS, "dtype": r.pop("dtype", "float32"), "probe": label or name, "knobs": key, **r}
                         for r in records])


def fig3_probes() -> pd.DataFrame:
    """kimi: 2 items, 3 layers; toy: 1 item, 2 layers with Δ = 0 at layer 0 and no landmarks records."""
    energy, norms, marks = [], [], []
    for model, items, layers in (("kimi_vl_a3b", 2, 3), ("toy_binding", 1, 2)):
        for i in range(items):
            for l in range(layers):
                zero = model == "toy_binding" and l == 0
                for channel, role in (("c_kv", "content"), ("k_pe", "rotary")):
                    base = {"model": model, "item_id": f"i{i}", "layer": l, "channel": channel, "role": role}
                    for m in (1, 2, 4, 8, 32, 64):
                        v = 1.0 if zero else 1 - 0.5 ** (m / (l + 1 + i))
                        energy.append({**base, "rank": m, "quantity": "energy_captured", "value": v})
                    energy.append(
                        {**base, "rank": None, "quantity": "e90_rank", "value": 0.0 if zero else 3.0 * (l + 1) + i}
                    )
                    r = 0.0 if zero else 0.1 * (l + 1) + 0.01 * i
                    norms.append(
                        {
                            **base,
                            "delta_norm": r * 10,
                            "conditioned_norm": 10.0,
                            "ratio": r,
                            "raw": r,
                            "position": 0.0 if role == "content" else 0.02,
                            "conditioning_a": r * 0.9,
                            "position_residual": 0.0 if zero else 0.01 * l,
                        }
                    )
                if model == "kimi_vl_a3b":
                    marks.append(
                        {
                            "model": model,
                            "item_id": f"i{i}",
                            "layer": l,
                            "quantity": "landmarks",
                            "value": float(5 + 2 * l + i),
                            "n_a": 100,
                        }
                    )
                    marks.append(
                        {"model": model, "item_id": f"i{i}", "layer": l, "quantity": "a_mass", "value": 0.5, "n_a": 100}
                    )
    return pd.concat(
        [
            probe_frame(energy, "energy", ranks=[1, 2, 4, 8, 32, 64], fraction=0.9),
            probe_frame(norms, "deficit_norms", "deficit_split", oracle=True),
            probe_frame(marks, "landmarks", fraction=0.9),
        ],
        ignore_index=True,
    )


def fig4_probes() -> pd.DataFrame:
    """Selector recall for two models (qwen has one item); video signals for kimi only."""
    sel = []
    for model, items in (("kimi_vl_a3b", 2), ("qwen2_5_vl_7b", 1)):
        for i in range(items):
            for s, v in (
                ("oracle", 1.0),
                ("cross_mass", 0.7 - 0.1 * i),
                ("first_k", 0.45),
                ("k_norm", 0.6),
                ("random", 0.5),
            ):
                sel.append(
                    {
                        "model": model,
                        "item_id": f"i{i}",
                        "selector": s,
                        "fraction": 0.5,
                        "k": 8,
                        "n_b": 16,
                        "quantity": "recall",
                        "value": v,
                    }
                )
    video = []
    for i in range(2):
        for t in range(6):
            base = {"model": "kimi_vl_a3b", "item_id": f"i{i}", "token": t, "frame": t // 3, "row": t % 3, "col": 0}
            for q, v in (
                ("delta_norm", t + i),
                ("motion", 6 - t),
                ("warp_residual", (t * 7) % 5),
                ("frame_similarity", 1.0),
                ("embed_diff", t * t),
            ):
                video.append({**base, "quantity": q, "value": float(v)})
    return pd.concat(
        [
            probe_frame(sel, "selector_recall", draws=32, fraction=0.5, seed=0),
            probe_frame(video, "video_signals", cell_px=16),
        ],
        ignore_index=True,
    )


def fig8_probes() -> pd.DataFrame:
    """qwen: 2 items on a 4 × 4 grid (3 layers, layer 0 Δ = 0) and 1 item on a 2 × 4 grid (left out); features
    and components bases."""
    out = []
    for basis in ("features", "components"):
        for item, nt in (("i0", 4), ("i1", 4), ("short", 2)):
            for l in range(3):
                for channel, role in (("k", "rotary"), ("v", "content")):
                    for tb in range(nt):
                        for fb in range(4):
                            v = 0.0 if l == 0 else l * (1 + tb) / (1 + fb if basis == "components" else 1)
                            out.append(
                                {
                                    "model": "qwen2_5_vl_7b",
                                    "item_id": item,
                                    "layer": l,
                                    "channel": channel,
                                    "role": role,
                                    "basis": basis,
                                    "token_bin": tb,
                                    "feature_bin": fb,
                                    "n_token_bins": nt,
                                    "n_feature_bins": 4,
                                    "quantity": "mean_abs",
                                    "value": v,
                                }
                            )
    frames = [
        probe_frame([r for r in out if r["basis"] == b], "depth_planes", label, basis=b, features=16, tokens=16)
        for b, label in (("features", "depth_planes"), ("components", "depth_components"))
    ]
    return pd.concat(frames, ignore_index=True)


def fig11_rows() -> pd.DataFrame:
    """kimi on a multi-hop benchmark: 3 items × 4 arms, plus one (item, arm) row repeated (a second source)."""
    page, out = 2**20 * 8, []
    for i in range(3):
        for arm, frac, correct in (
            ("reprefill", 1.0, 1.0),
            ("blind", 0.0, float(i == 0)),
            ("patch_r16", 0.06, 1.0),
            ("patch_r64", 0.25, float(i != 1)),
        ):
            out.append(
                {
                    **KEYS,
                    "dtype": "bfloat16",
                    "model": "kimi_vl_a3b",
                    "bench": "mmlongbench_doc",
                    "item_id": f"i{i}",
                    "arm": arm,
                    "knobs": "{}",
                    "bytes": int(frac * page),
                    "bytes_frac": frac,
                    "correct": correct,
                }
            )
    return pd.DataFrame([*out, out[2]])


def fig11_probes() -> pd.DataFrame:
    """ttft records of one model on CPU, two segment lengths, rank 16, two items (medians are taken)."""
    out = []
    for item, scale in (("i0", 1.0), ("i1", 3.0)):
        for n_vis, n_b in ((256, 270), (512, 540)):
            k = n_vis / 256
            per = {
                "vision_ms": 40 * k,
                "prefill_ms": 100 * k * k,
                "canonical_ms": 90 * k,
                "conditioned_ms": 150 * k,
                "svd_ms": 10 * k,
            }
            per["recompute_ms"] = per["vision_ms"] + per["prefill_ms"]
            per["form_ms"] = per["canonical_ms"] + per["conditioned_ms"] + per["svd_ms"]
            base = {
                "model": "kimi_vl_a3b",
                "item_id": item,
                "device": "cpu",
                "timer": "perf_counter",
                "n_b": n_b,
                "n_visual": n_vis,
                "n_frames": int(k),
            }
            out += [{**base, "rank": None, "quantity": q, "value": v * scale} for q, v in per.items()]
            reuse = 20 * k * scale
            for q, v in (
                ("apply_ms", 2 * k * scale),
                ("reuse_ms", reuse),
                ("speedup_prefill", per["prefill_ms"] * scale / reuse),
                ("speedup_recompute", per["recompute_ms"] * scale / reuse),
            ):
                out.append({**base, "rank": 16, "quantity": q, "value": v})
    return probe_frame(out, "ttft", device="cpu", frame_px=448, ranks=[16], repeats=3, sizes=[256, 512])


def fig12_rows() -> pd.DataFrame:
    """Two models × 4 items on multiple choice; qwen also has a float32 copy of its blind rows (two dtypes)."""
    out = []
    arms = {
        "reprefill": 0.0,
        "unrotated": 0.3,
        "blind": 0.05,
        "patch_r8": 1e-3,
        "patch_r64": 1e-4,
        "patch_r256": 0.0,
        "patch_full": 2e-5,
    }
    for model in ("kimi_vl_a3b", "qwen2_5_vl_7b"):
        for i in range(4):
            for arm, kl in arms.items():
                gold = "A"
                pred = "B" if (arm in ("unrotated", "blind") and i % 2) or (arm == "patch_r8" and i == 3) else gold
                out.append(
                    {
                        **KEYS,
                        "dtype": "bfloat16",
                        "model": model,
                        "item_id": f"i{i}",
                        "arm": arm,
                        "knobs": "{}",
                        "kl": kl * (1 + i),
                        "recovered": pred == gold,
                        "pred": pred,
                        "gold": gold,
                        "correct": float(pred == gold),
                        "n_choices": 4,
                    }
                )
    extra = [
        {**r, "dtype": "float32", "kl": r["kl"] / 2}
        for r in out
        if r["model"] == "qwen2_5_vl_7b" and r["arm"] == "blind"
    ]
    return pd.DataFrame([*out, *extra])


def fig12_probes() -> pd.DataFrame:
    """Relocation records of one model in float32 (with the floor) and bfloat16, two items, two layers."""
    out = []
    for dtype, floor in (("float32", 2e-3), ("bfloat16", math.nan)):
        for i in range(2):
            for d in (1, 100, 10_000):
                for l in range(2):
                    base = {
                        "model": "qwen2_5_vl_7b",
                        "dtype": dtype,
                        "item_id": f"i{i}",
                        "scheme": "mrope_sectioned",
                        "pair_layout": "half",
                        "distance": d,
                        "layer": l,
                        "channel": "k",
                    }
                    err = (1e-7 * d**0.5 if dtype == "float32" else 3e-3) * (1 + l) * (1 + i)
                    out.append({**base, "quantity": "rel_err", "value": err})
                    if dtype == "float32":
                        out.append({**base, "quantity": "bf16_floor", "value": floor})
    return probe_frame(out, "relocation", distances=[1, 100, 10_000])
