"""What an experiment costs on H100s, before it runs: the forwards each job runs per item, their FLOPs from
the model's published config, and an H100 throughput.

    python -m kamera.sweep.cost experiment=table3          # per job and total H100-hours
    python -m kamera.sweep.cost experiment=fig5 --tokens muirbench=6000
    python -m kamera.sweep.cost --check                    # paper experiments whose stated cost is off
    python -m kamera.sweep.cost --check --update           # … and rewrite their cost.h100_hours

Model FLOPs (:class:`ModelFlops`) come from the full published config (the shaped writer's spec, or the
loader's own copy of config.json): per token, 2 × the decoder's active weights (attention projections, MLA's
low-rank ones included; dense MLP or the routed top-k experts, shared experts and router) plus the attention
scores over the context (QKᵀ and AV, 2 FLOPs per multiply-add each); for each image token the vision tower's
2 × weights per patch (``merge²`` patches per token). The LM head runs once per forward.

Forwards per item, a list of :class:`Forward` (new tokens, mean attended context, count) derived from what
the code runs:

- arm jobs (:class:`ItemShape`): the shared quantities the job's arms and probes declare in ``needs``
  (:data:`~kamera.reuse.plugin.SHARED`), each forward at most once: the full prefill (N tokens), B's canonical
  behind the prefix, blind reuse's query forward, the 4D-mask oracle (N); every arm job also runs the full
  prefill and blind reuse (every row's KL reference and floor). Each arm adds one query forward over the
  spliced cache (q tokens over N); arms that recompute tokens before their query (CacheBlend, shallow
  re-prefill …) run more, so their jobs are under-counted by at most their recomputed share of B.
- probes: each probe declares ``cost_forwards(shape, n_layers)``, the forwards it runs itself beyond the
  shared ones (relocation: B alone at 0 and at each distance; injection depth: Σ_ℓ (L − ℓ) layer passes of
  B's rows; TTFT: its own timing items), next to its ``run``.
- window jobs (:class:`WindowShape`): each window probe declares ``cost_forwards(shape, n_layers)``: the
  layouts it re-prefills (prefix · chunks · query, one forward each), its query forwards (blind reuse and
  each variant), the target's canonical and partial re-runs of the target's rows. Layouts two probes of one
  job share are computed once by :class:`~kamera.window.context.WindowContext` but counted per probe (an
  upper bound: a job's probes overlap in at most a layout or two). Every chunk of the stream (history and
  foreign) goes through the vision tower once.

Throughput: H100 SXM dense bf16 peak 989 TFLOP/s (NVIDIA H100 datasheet) at ``MFU`` = 0.35, a typical
batch-1 prefill utilisation; an item adds ``ITEM_S`` of work that is not model FLOPs and a job ``LOAD_S``
per model load. Tokens and items are the experiment's stated ``cost:`` block, assumptions to replace with
the measured means a first job logs (``cost.tokens`` per benchmark: ``n``, ``n_b``, ``image_tokens`` for an
arm item; ``chunk`` and ``image_tokens`` per chunk for a window item; ``cost.items`` per benchmark or
``bench:subset`` where ``n_items`` is null, i.e. every item); after a run the measured seconds in the rows
are the better number. A job whose model has no readable published config is listed as not estimated,
with the reason, and counts 0 in the total.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import NamedTuple

from omegaconf import OmegaConf

from kamera.job import CONF_DIR, job_specs, shape_of
from kamera.knobs import is_int
from kamera.models.flops import Forward, paper_model_flops
from kamera.sweep.expand import compose_config, composed, paper_experiments

H100_BF16_FLOPS = 989e12
MFU = 0.35
OVERHEAD = 1.15  # kernels below peak around the matmuls (norms, rotary, softmax), on top of MFU
ITEM_S = 2.0  # per item: image preprocessing, one float64 SVD per layer-channel, splices, Python
LOAD_S = 120.0  # reading a ~15-60 GB checkpoint and building the model, per job
TOLERANCE = 0.1  # --check: a stated h100_hours within 10% of the computed one is current

def job_hours(name: str, forwards: list[Forward], image_tokens: float, n_items: int) -> float:
    """Estimated H100-hours of one job (one model load, ``n_items`` items of these forwards and image tokens)."""
    flops = paper_model_flops(name).forwards(forwards, image_tokens) * OVERHEAD
    return (n_items * (flops / (H100_BF16_FLOPS * MFU) + ITEM_S) + LOAD_S) / 3600.0

def _stated(cfg, key: str) -> dict:
    return dict((cfg.get("cost") or {}).get(key, {}) or {})

def h100_hours(cfg) -> float:
    """Estimated H100-hours of the composed job ``cfg`` from its experiment's ``cost:`` block; NaN when the model
    has no readable published config (:func:`not_estimated` says why). ValueError naming what the block lacks."""
    return _job(cfg)[0]

def not_estimated(name: str) -> str | None:
    """Why model ``name`` has no cost estimate, or None when it has one."""
    try:
        paper_model_flops(name)
    except ValueError as err:
        return str(err).split(" (")[0]
    return None

def _n_items(cfg, bench: str) -> int:
    if cfg.n_items is not None:
        if not is_int(cfg.n_items) or cfg.n_items < 1:
            raise ValueError(f"n_items={cfg.n_items!r}: must be an integer >= 1 (or null: all)")
        return int(cfg.n_items)
    items = _stated(cfg, "items")
    subsets = str(cfg.bench.subset).split(",") if cfg.bench.get("subset") else []
    keys = [f"{bench}:{s}" for s in subsets] if subsets and all(f"{bench}:{s}" in items for s in subsets) else [bench]
    if not all(k in items for k in keys):
        raise ValueError(f"{cfg.group}: n_items is null (every item) and the experiment states no cost.items for "
                         f"{' / '.join(keys)}")
    return sum(int(items[k]) for k in keys)

def _job(cfg) -> tuple[float, str]:
    """(hours, note) of one composed job: the note names why a job is not estimated (hours NaN)."""
    bench, shape = str(cfg.bench.name), shape_of(cfg)
    spec = _stated(cfg, "tokens").get(bench)
    main_key = shape.cost_keys[0]  # tokens per item (per chunk for window items)
    if not spec or spec.get(main_key) is None:
        raise ValueError(f"{cfg.group}: the experiment states no cost.tokens for {bench} "
                         f"({main_key}: tokens per {'chunk' if main_key == 'chunk' else 'item'})")
    sizes = {k: spec.get(k) for k in shape.cost_keys if k in spec}
    bad = [f"{k}={v!r}" for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int)
           or v < (0 if k == "image_tokens" else 1)] + \
        ([f"n_b={spec['n_b']} > n={spec['n']}"] if "n_b" in sizes and int(spec["n_b"]) > int(spec["n"]) else [])
    if bad:
        raise ValueError(f"{cfg.group}: cost.tokens.{bench} has {', '.join(bad)} (token counts are integers ≥ 1, "
                         "image_tokens ≥ 0)")
    n_items = _n_items(cfg, bench)
    specs = job_specs(cfg)
    why = not_estimated(str(cfg.model.name))
    if why:
        return float("nan"), why
    name = str(cfg.model.name)
    forwards, image = shape.cost_forwards(cfg, spec, specs, paper_model_flops(name).layers)
    return job_hours(name, forwards, image, n_items), ""


class JobCost(NamedTuple):
    model: str
    bench: str
    hours: float  # NaN: not estimated (``note`` says why)
    note: str = ""

def experiment_hours(overrides: list[str], tokens: dict[str, int] | None = None) -> tuple[list[JobCost], float]:
    """Per job (model, bench, hours, note) and the total for the sweep ``overrides`` (``experiment=<name>`` and
    any others); ``tokens`` replaces a benchmark's stated tokens per item (per chunk for a window benchmark).
    Jobs whose model has no readable published config count 0 and carry NaN and the reason."""
    rows, seen = [], set()
    for _, cfg in composed(overrides):
        name = str(cfg.bench.name)
        seen.add(name)
        if tokens and name in tokens:
            OmegaConf.update(cfg, f"cost.tokens.{name}.{shape_of(cfg).cost_keys[0]}", tokens[name],
                             force_add=True)
        bench = name + (f":{cfg.bench.subset}" if cfg.bench.get("subset") else "")
        hours, note = _job(cfg)
        rows.append(JobCost(str(cfg.model.name), bench, hours, note))
    unused = sorted(set(tokens or {}) - seen)
    if unused:
        raise ValueError(f"tokens given for {', '.join(unused)}, which no job of this sweep reads "
                         f"(its benchmarks: {', '.join(sorted(seen))})")
    return rows, sum(r.hours for r in rows if r.hours == r.hours)

def check(experiments: list[str], overrides: list[str] = ()) -> list[tuple[str, float | None, float]]:
    """(experiment, stated, computed) for each experiment (composed with ``overrides``) whose ``cost.h100_hours``
    is missing or off by more than ``TOLERANCE``."""
    off = []
    for exp in experiments:
        stated = (compose_config([f"experiment={exp}", *overrides]).get("cost") or {}).get("h100_hours")
        _, total = experiment_hours([f"experiment={exp}", *overrides])
        if stated is None or abs(float(stated) - total) > TOLERANCE * total:
            off.append((exp, None if stated is None else float(stated), total))
    return off

def update(experiment: str, hours: float) -> Path:
    """Rewrite the ``h100_hours:`` line of conf/experiment/<experiment>.yaml's ``cost:`` block (nothing else)."""
    path = CONF_DIR / "experiment" / f"{experiment}.yaml"
    text, n = re.subn(r"^(  h100_hours:) *[^#\n]*?( *#.*)?$", rf"\g<1> {hours:.3g}\g<2>", path.read_text(), count=1,
                      flags=re.M)
    if n != 1:
        raise ValueError(f"{path} has no cost: block with an h100_hours line; add one (with its cost.tokens) first")
    path.write_text(text)
    return path

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kamera.models.cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="experiment=<name> and any Hydra overrides")
    ap.add_argument("--tokens", action="append", default=[], metavar="BENCH=N",
                    help="tokens per item (per chunk for a window benchmark) for a benchmark (overrides cost.tokens)")
    ap.add_argument("--check", action="store_true",
                    help="list the paper experiments whose stated cost.h100_hours is missing or off by >10%% (exit 1)")
    ap.add_argument("--update", action="store_true", help="with --check: rewrite those experiments' cost.h100_hours")
    args = ap.parse_args(argv)
    if args.check:
        off = check(paper_experiments())
        for exp, stated, total in off:
            print(f"{exp:12s} states {stated if stated is not None else 'no'} H100-h; computed {total:.3g}")
            if args.update:
                try:
                    print(f"{'':12s} updated {update(exp, total)}")
                except ValueError as err:
                    print(f"error: {err}", file=sys.stderr)
                    return 2
        return 1 if off and not args.update else 0
    if args.update:
        ap.error("--update goes with --check")
    if not args.overrides:
        ap.error("name the sweep (experiment=<name> …) or pass --check")
    try:
        tokens = {k: int(v) for k, _, v in (t.partition("=") for t in args.tokens)}
    except ValueError:
        print(f"error: --tokens takes BENCH=N with an integer N, got {args.tokens}", file=sys.stderr)
        return 2
    try:
        rows, total = experiment_hours(args.overrides, tokens)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for r in rows:
        print(f"{r.model:24s} {r.bench:32s} {r.hours:8.3f} H100-h" if r.hours == r.hours
              else f"{r.model:24s} {r.bench:32s}  not estimated: {r.note}")
    print(f"{'total':57s} {total:8.3f} H100-h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
