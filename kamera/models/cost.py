"""What an experiment costs on H100s, before it runs: FLOPs per item from the model's published config, tokens
per item from the experiment, and an H100 throughput.

    python -m kamera.models.cost experiment=table3          # per job and total H100-hours
    python -m kamera.models.cost experiment=fig5 --tokens muirbench=6000

Model FLOPs come from the full published config (the shaped writers hold it): per token, 2 × the
decoder's active weights (attention projections, dense MLP or the routed top-k experts and router) plus
the attention scores over the context (4 · layers · q-width · context), and for each image token the
vision tower's 2 × weights per patch (``merge²`` patches per token). The LM head runs once per forward.
Per item the harness runs the full prefill (N tokens), B's canonical prefill behind the prefix
(n_B + prefix), one query forward per arm (q tokens over N), and the 4D-mask oracle (N) when an arm
asks for it; the SVDs and splices are small beside these and counted by ``OVERHEAD``.

Throughput: H100 SXM dense bf16 peak 989 TFLOP/s (NVIDIA H100 datasheet) at ``MFU`` = 0.35, a typical
batch-1 prefill utilisation; an item adds ``ITEM_S`` of work that is not model FLOPs and a job ``LOAD_S``
per model load. Tokens per item are the
experiment's stated ``cost.tokens`` (per benchmark: context tokens, of which B, and the image tokens),
assumptions to replace with the measured means a first job logs; after a run the measured seconds in
the rows are the better number.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

H100_BF16_FLOPS = 989e12
MFU = 0.35
OVERHEAD = 1.15  # kernels below peak around the matmuls (norms, rotary, softmax), on top of MFU
ITEM_S = 2.0  # per item: image preprocessing, one float64 SVD per layer-channel, splices, Python
LOAD_S = 120.0  # reading a ~15-60 GB checkpoint and building the model, per job


@dataclass(frozen=True)
class ItemShape:
    """Tokens of one item: the whole context ``n``, B's ``n_b``, the prefix, the query and image tokens."""

    n: int
    n_b: int
    prefix: int = 40
    query: int = 60
    image_tokens: int = 0


@dataclass(frozen=True)
class ModelFlops:
    """Per-token FLOPs of a model, read off its published config."""

    name: str
    decoder: float  # 2 × active decoder weights per token
    layers: int
    q_width: int  # attention heads × head dim
    head: float  # 2 × hidden × vocabulary (one per forward)
    vision_per_token: float  # vision tower FLOPs per image token the language model sees

    def forward(self, tokens: int, context: int) -> float:
        """FLOPs of a forward over ``tokens`` new tokens attending ``context`` tokens on average."""
        return tokens * (self.decoder + 4 * self.layers * self.q_width * context) + self.head

    def item(self, shape: ItemShape, n_arms: int, oracle: bool) -> float:
        """FLOPs of one item: full prefill, canonical prefill, one query per arm, the oracle if asked, vision."""
        full = self.forward(shape.n, shape.n // 2)
        solo = self.forward(shape.n_b, shape.prefix + shape.n_b // 2)
        queries = n_arms * self.forward(shape.query, shape.n)
        return full + solo + queries + (full if oracle else 0.0) + shape.image_tokens * self.vision_per_token


def model_flops(name: str, config: dict) -> ModelFlops:
    """Per-token FLOPs from a published config, read through transformers' config classes (so values the
    file leaves at their defaults count too)."""
    import transformers as tf

    parsed = tf.AutoConfig.for_model(**config)
    parsed = getattr(parsed, "thinker_config", parsed)
    t = parsed.get_text_config(decoder=True)
    h, heads, layers = t.hidden_size, t.num_attention_heads, t.num_hidden_layers
    head_dim = getattr(t, "head_dim", None) or h // heads
    kv = getattr(t, "num_key_value_heads", None) or heads
    attn = 2 * h * heads * head_dim + 2 * h * kv * head_dim
    if getattr(t, "num_experts", None):
        mlp = t.num_experts_per_tok * 3 * h * t.moe_intermediate_size + h * t.num_experts
        mlp += 3 * h * (getattr(t, "shared_expert_intermediate_size", 0) or 0)
    else:
        mlp = 3 * h * t.intermediate_size
    v = getattr(parsed, "vision_config", None)
    vision = 0.0
    if v is not None:
        vh, vint = v.hidden_size, getattr(v, "intermediate_size", 4 * v.hidden_size)
        vlayers = getattr(v, "depth", None) or v.num_hidden_layers
        # patches the tower sees per token the language model sees: merge², 1 / pixel-shuffle ratio², scale²
        per_token = (getattr(v, "spatial_merge_size", None) or getattr(parsed, "scale_factor", None)
                     or round(1 / getattr(parsed, "downsample_ratio", 1.0))) ** 2
        vision = 2.0 * vlayers * (4 * vh * vh + 2 * vh * vint) * per_token
    return ModelFlops(name, 2.0 * layers * (attn + mlp), layers, heads * head_dim, 2.0 * h * t.vocab_size, vision)


def published_config(name: str) -> dict:
    """A paper model's full published config, from its shaped-checkpoint writer."""
    from kamera.shaped import shaped_writer

    spec = getattr(shaped_writer(name), "spec", None)
    if spec is None:
        raise ValueError(f"{name}: its shaped writer carries no published config to read FLOPs from")
    return spec.config


def job_hours(name: str, shape: ItemShape, n_items: int, n_arms: int, oracle: bool) -> float:
    """Estimated H100-hours of one job (one model load, ``n_items`` items)."""
    flops = model_flops(name, published_config(name)).item(shape, n_arms, oracle) * OVERHEAD
    return (n_items * (flops / (H100_BF16_FLOPS * MFU) + ITEM_S) + LOAD_S) / 3600.0


def h100_hours(cfg) -> float:
    """Estimated H100-hours of the composed job ``cfg`` from its experiment's ``cost.tokens``; NaN when the
    model has no published config (no checkpoint writer yet). ValueError when no tokens are stated."""
    spec = dict((cfg.get("cost") or {}).get("tokens", {}) or {}).get(str(cfg.bench.name))
    if not spec or not spec.get("n"):
        raise ValueError(f"{cfg.group}: the experiment states no cost.tokens for {cfg.bench.name}")
    n = int(spec["n"])
    shape = ItemShape(n=n, n_b=int(spec.get("n_b", 500)), image_tokens=int(spec.get("image_tokens", n // 2)))
    arms = [str(a) for a in cfg.arms]
    try:
        return job_hours(str(cfg.model.name), shape, int(cfg.n_items), len(arms), "oracle4d" in arms)
    except ValueError:
        return float("nan")


def experiment_hours(overrides: list[str], tokens: dict[str, int] | None = None) -> tuple[list[tuple[str, str, float]], float]:
    """Per job (model, bench, hours) and the total for the sweep ``overrides`` (``experiment=<name>`` and any
    others); ``tokens`` replaces a benchmark's stated context tokens. Jobs whose model has no published
    config (no writer yet) count 0 and are listed with NaN."""
    from omegaconf import open_dict

    from kamera.sweep import compose_config, expand

    rows = []
    for job in expand(overrides):
        cfg = compose_config(job)
        name = str(cfg.bench.name)
        if tokens and name in tokens:
            with open_dict(cfg):
                cfg.cost.tokens[name].n = int(tokens[name])
        bench = name + (f":{cfg.bench.subset}" if cfg.bench.get("subset") else "")
        rows.append((str(cfg.model.name), bench, h100_hours(cfg)))
    return rows, sum(h for _, _, h in rows if h == h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kamera.models.cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="+", help="experiment=<name> and any Hydra overrides")
    ap.add_argument("--tokens", action="append", default=[], metavar="BENCH=N",
                    help="context tokens per item for a benchmark (overrides the experiment's cost.tokens)")
    args = ap.parse_args(argv)
    try:
        tokens = {k: int(v) for k, _, v in (t.partition("=") for t in args.tokens)}
    except ValueError:
        print(f"error: --tokens takes BENCH=N with an integer N, got {args.tokens}", file=sys.stderr)
        return 2
    rows, total = experiment_hours(args.overrides, tokens)
    for model, bench, hours in rows:
        print(f"{model:24s} {bench:32s} {hours:8.3f} H100-h" if hours == hours else f"{model:24s} {bench:32s}  no published config yet")
    print(f"{'total':57s} {total:8.3f} H100-h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
