"""What an experiment costs on H100s, before it runs: the forwards each job runs per item, their FLOPs from
the model's published config, and an H100 throughput.

    python -m kamera.models.cost experiment=table3          # per job and total H100-hours
    python -m kamera.models.cost experiment=fig5 --tokens muirbench=6000
    python -m kamera.models.cost --check                    # paper experiments whose stated cost is off
    python -m kamera.models.cost --check --update           # … and rewrite their cost.h100_hours

Model FLOPs (:class:`ModelFlops`) come from the full published config (the shaped writer's spec, or the
loader's own copy of config.json): per token, 2 × the decoder's active weights (attention projections, MLA's
low-rank ones included; dense MLP or the routed top-k experts, shared experts and router) plus the attention
scores over the context (QKᵀ and AV, 2 FLOPs per multiply-add each); for each image token the vision tower's
2 × weights per patch (``merge²`` patches per token). The LM head runs once per forward.

Forwards per item, a list of :class:`Forward` (new tokens, mean attended context, count) derived from what
the code runs:

- arm jobs (:class:`ItemShape`): the shared quantities the job's arms and probes declare in ``needs``
  (:data:`~kamera.registry.SHARED`), each forward at most once: the full prefill (N tokens), B's canonical
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
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple

H100_BF16_FLOPS = 989e12
MFU = 0.35
OVERHEAD = 1.15  # kernels below peak around the matmuls (norms, rotary, softmax), on top of MFU
ITEM_S = 2.0  # per item: image preprocessing, one float64 SVD per layer-channel, splices, Python
LOAD_S = 120.0  # reading a ~15-60 GB checkpoint and building the model, per job
TOLERANCE = 0.1  # --check: a stated h100_hours within 10% of the computed one is current


class Forward(NamedTuple):
    """``count`` forwards of ``tokens`` new tokens attending ``context`` tokens on average (a fractional count
    is a partial forward through that share of the layers)."""

    tokens: float
    context: float
    count: float = 1.0


@dataclass(frozen=True)
class ItemShape:
    """Tokens of one arm item: the whole context ``n``, B's ``n_b``, the prefix, the query and image tokens."""

    n: int
    n_b: int
    prefix: int = 40
    query: int = 60
    image_tokens: int = 0

    def full(self, count: float = 1.0) -> Forward:
        """The full prefill [prefix · A · B · query] (also the 4D-mask oracle's shape)."""
        return Forward(self.n, self.n / 2, count)

    def solo(self, count: float = 1.0) -> Forward:
        """B's canonical prefill behind the prefix."""
        return Forward(self.n_b, self.prefix + self.n_b / 2, count)

    def query_over(self, count: float = 1.0) -> Forward:
        """A query forward over the whole item's cache."""
        return Forward(self.query, self.n, count)

    def b_alone(self, count: float = 1.0) -> Forward:
        """B prefilled with nothing before it."""
        return Forward(self.n_b, self.n_b / 2, count)

    def b_in_context(self, count: float = 1.0) -> Forward:
        """B's rows re-run over the full prefill's cache (``count`` < 1: through that share of the layers)."""
        return Forward(self.n_b, self.n, count)


@dataclass(frozen=True)
class WindowShape:
    """Tokens of one window item: ``chunk`` tokens per chunk (``image_tokens`` of them visual), the prefix and
    query, the window ``k``, the ``history`` chunks of the stream and the ``foreign`` chunks of another clip."""

    chunk: int
    window: int
    history: int
    foreign: int = 0
    prefix: int = 40
    query: int = 60
    image_tokens: int = 0

    def layout(self, chunks: int, count: float = 1.0) -> Forward:
        """The re-prefill of a layout of ``chunks`` chunks (target included): prefix · chunks · query."""
        n = self.prefix + chunks * self.chunk + self.query
        return Forward(n, n / 2, count)

    def query_over(self, chunks: int, count: float = 1.0) -> Forward:
        """A query forward over a spliced layout of ``chunks`` chunks."""
        return Forward(self.query, self.prefix + chunks * self.chunk, count)

    def canonical(self, count: float = 1.0) -> Forward:
        """A chunk's canonical prefill behind the prefix."""
        return Forward(self.chunk, self.prefix + self.chunk / 2, count)

    def rows(self, chunks: int, share: float) -> Forward:
        """The target's rows re-run through ``share`` of the layers over a layout of ``chunks`` chunks."""
        return Forward(self.chunk, self.prefix + chunks * self.chunk, share)


@dataclass(frozen=True)
class ModelFlops:
    """Per-token FLOPs of a model, read off its published config."""

    name: str
    decoder: float  # 2 × active decoder weights per token
    layers: int
    q_width: int  # half the attention-score FLOPs per token and context token, per layer: heads × (qk + v) / 2
    head: float  # 2 × hidden × vocabulary (one per forward)
    vision_per_token: float  # vision tower FLOPs per image token the language model sees

    def forward(self, tokens: float, context: float) -> float:
        """FLOPs of a forward over ``tokens`` new tokens attending ``context`` tokens on average."""
        return tokens * (self.decoder + 4 * self.layers * self.q_width * context) + self.head

    def forwards(self, forwards: list[Forward], image_tokens: float = 0.0) -> float:
        """FLOPs of a list of forwards plus ``image_tokens`` through the vision tower."""
        return sum(f.count * self.forward(f.tokens, f.context) for f in forwards) + image_tokens * self.vision_per_token


def _get(config: object, key: str, default: object = None) -> object:
    value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
    return default if value is None else value


def model_flops(name: str, config: dict) -> ModelFlops:
    """Per-token FLOPs from a published config, read through transformers' config classes (so values the
    file leaves at their defaults count too). MLA (``kv_lora_rank``) and DeepSeek-style MoE
    (``n_routed_experts``, shared experts, ``first_k_dense_replace`` dense layers) are counted as such."""
    import transformers as tf

    parsed = tf.AutoConfig.for_model(**config)
    parsed = getattr(parsed, "thinker_config", parsed)
    t = parsed.get_text_config(decoder=True)
    h, heads, layers = t.hidden_size, t.num_attention_heads, t.num_hidden_layers
    if _get(t, "kv_lora_rank"):  # MLA: q (or its low-rank pair), the joint KV down-projection, its up-projection, o
        qk, v, rope = t.qk_nope_head_dim + t.qk_rope_head_dim, t.v_head_dim, t.qk_rope_head_dim
        q = h * heads * qk if not _get(t, "q_lora_rank") else t.q_lora_rank * (h + heads * qk)
        attn = q + h * (t.kv_lora_rank + rope) + t.kv_lora_rank * heads * (t.qk_nope_head_dim + v) + heads * v * h
        q_width = heads * (qk + v) // 2
    else:
        head_dim = _get(t, "head_dim") or h // heads
        kv = _get(t, "num_key_value_heads", heads)
        attn = 2 * h * heads * head_dim + 2 * h * kv * head_dim
        q_width = heads * head_dim
    experts = _get(t, "num_experts") or _get(t, "n_routed_experts")
    if experts:
        moe = t.num_experts_per_tok * 3 * h * t.moe_intermediate_size + h * experts
        moe += 3 * h * (_get(t, "shared_expert_intermediate_size", 0) or _get(t, "n_shared_experts", 0) * t.moe_intermediate_size)
        dense = _get(t, "first_k_dense_replace", 0)
        mlp_total = dense * 3 * h * t.intermediate_size + (layers - dense) * moe
    else:
        mlp_total = layers * 3 * h * t.intermediate_size
    v_cfg = getattr(parsed, "vision_config", None)
    vision = 0.0
    if v_cfg is not None:
        vh = v_cfg.hidden_size
        vint = _get(v_cfg, "intermediate_size", 4 * vh)
        vlayers = _get(v_cfg, "depth") or v_cfg.num_hidden_layers
        # patches the tower sees per token the language model sees: merge², merge kernel, 1 / pixel-shuffle ratio², scale²
        kernel = _get(v_cfg, "merge_kernel_size")
        per_token = (kernel[0] * kernel[1] if kernel else None) or (_get(v_cfg, "spatial_merge_size") or _get(
            parsed, "scale_factor") or round(1 / _get(parsed, "downsample_ratio", 1.0))) ** 2
        vision = 2.0 * vlayers * (4 * vh * vh + 2 * vh * vint) * per_token
    return ModelFlops(name, 2.0 * (layers * attn + mlp_total), layers, q_width, 2.0 * h * t.vocab_size, vision)


def published_config(name: str) -> dict:
    """A paper model's full published config, as transformers reads it: its shaped-checkpoint spec's config, or
    for a remote-code config (``model_type`` transformers does not know, e.g. Kimi-VL's ``kimi_vl``) the native
    config its loader module maps it to (``native_config``). ValueError naming why not."""
    import importlib

    from transformers import CONFIG_MAPPING

    from kamera.models.registry import entry
    from kamera.shaped import shaped_writer

    config = shaped_writer(name).spec.config
    if config.get("model_type") in CONFIG_MAPPING:
        return config
    loader = entry(name).loader
    native = getattr(importlib.import_module(loader.split(":")[0]), "native_config", None) if loader else None
    if native is None:
        raise ValueError(f"{name}: its published config ({config.get('model_type')}) is remote code and its loader "
                         "has no native_config mapping for transformers")
    return native(config).to_dict()


@cache
def paper_model_flops(name: str) -> ModelFlops:
    """:func:`model_flops` of a paper model's :func:`published_config` (read once per process)."""
    return model_flops(name, published_config(name))


def job_hours(name: str, forwards: list[Forward], image_tokens: float, n_items: int) -> float:
    """Estimated H100-hours of one job (one model load, ``n_items`` items of these forwards and image tokens)."""
    flops = paper_model_flops(name).forwards(forwards, image_tokens) * OVERHEAD
    return (n_items * (flops / (H100_BF16_FLOPS * MFU) + ITEM_S) + LOAD_S) / 3600.0


# which shared quantities a shared quantity computes first (kamera.context.ReuseContext), and the forward each runs
_DEPENDS = {"conditioned": {"full"}, "relocated": {"canonical"}, "deficit": {"conditioned", "relocated"},
            "patch": {"deficit"}, "blind": {"full", "relocated"}}


def item_forwards(shape: ItemShape, arms: list, probes: list, n_layers: int) -> list[Forward]:
    """The forwards of one arm item: the shared ones the plugins need (once each), one query per arm, and
    each probe's own ``cost_forwards``."""
    needs = set().union(*(p.needs for p in [*arms, *probes])) | ({"full", "blind"} if arms else set())
    while True:
        more = needs.union(*(_DEPENDS.get(n, set()) for n in needs))
        if more == needs:
            break
        needs = more
    shared = {"full": shape.full(), "canonical": shape.solo(), "blind": shape.query_over(), "oracle": shape.full()}
    out = [f for n, f in shared.items() if n in needs]
    if arms:
        out.append(shape.query_over(len(arms)))
    return out + [f for p in probes for f in p.cost_forwards(shape, n_layers)]


def window_forwards(shape: WindowShape, probes: list, n_layers: int) -> list[Forward]:
    """The forwards of one window item: each window probe's ``cost_forwards``."""
    return [f for p in probes for f in p.cost_forwards(shape, n_layers)]


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
    from kamera.job import job_specs
    from kamera.window.job import is_window, options

    bench = str(cfg.bench.name)
    spec = _stated(cfg, "tokens").get(bench)
    window = is_window(cfg)
    if not spec or spec.get("chunk" if window else "n") is None:
        raise ValueError(f"{cfg.group}: the experiment states no cost.tokens for {bench} "
                         f"({'chunk' if window else 'n'}: tokens per {'chunk' if window else 'item'})")
    sizes = {k: spec.get(k) for k in ("chunk", "image_tokens") if k in spec} if window else \
        {k: spec.get(k) for k in ("n", "n_b", "image_tokens") if k in spec}
    bad = [f"{k}={v!r}" for k, v in sizes.items() if isinstance(v, bool) or not isinstance(v, int)
           or v < (0 if k == "image_tokens" else 1)] + \
        ([f"n_b={spec['n_b']} > n={spec['n']}"] if not window and int(spec.get("n_b", 0)) > int(spec["n"]) else [])
    if bad:
        raise ValueError(f"{cfg.group}: cost.tokens.{bench} has {', '.join(bad)} (token counts are integers ≥ 1, "
                         "image_tokens ≥ 0)")
    n_items = _n_items(cfg, bench)
    plugins, probes = job_specs(cfg)
    why = not_estimated(str(cfg.model.name))
    if why:
        return float("nan"), why
    name = str(cfg.model.name)
    n_layers = paper_model_flops(name).layers
    if window:
        o = options(cfg)
        shape = WindowShape(chunk=int(spec["chunk"]), window=int(o["window"]), history=int(o["segments"]),
                            foreign=int(o.get("n_foreign", 0)), image_tokens=int(spec.get("image_tokens", 0)))
        forwards = window_forwards(shape, [s.plugin for s in plugins], n_layers)
        image = (shape.history + shape.foreign) * shape.image_tokens
    else:
        n = int(spec["n"])
        shape = ItemShape(n=n, n_b=int(spec.get("n_b", 500)), image_tokens=int(spec.get("image_tokens", n // 2)))
        forwards = item_forwards(shape, [s.plugin for s in plugins], [s.plugin for s in probes], n_layers)
        image = shape.image_tokens
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
    from omegaconf import OmegaConf

    from kamera.sweep import compose_config, expand
    from kamera.window.job import is_window

    rows, seen = [], set()
    for job in expand(overrides):
        cfg = compose_config(job)
        name = str(cfg.bench.name)
        seen.add(name)
        if tokens and name in tokens:
            OmegaConf.update(cfg, f"cost.tokens.{name}.{'chunk' if is_window(cfg) else 'n'}", tokens[name],
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
    from kamera.sweep import compose_config

    off = []
    for exp in experiments:
        stated = (compose_config([f"experiment={exp}", *overrides]).get("cost") or {}).get("h100_hours")
        _, total = experiment_hours([f"experiment={exp}", *overrides])
        if stated is None or abs(float(stated) - total) > TOLERANCE * total:
            off.append((exp, None if stated is None else float(stated), total))
    return off


def update(experiment: str, hours: float) -> Path:
    """Rewrite the ``h100_hours:`` line of conf/experiment/<experiment>.yaml's ``cost:`` block (nothing else)."""
    from kamera.sweep import CONF_DIR

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
        from kamera.shaped.rehearse import paper_experiments

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
