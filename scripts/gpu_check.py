"""Device check: the operator's exactness on an accelerator, per tiny family, in one short run.

For each tiny family and dtype it prints relocation error (layer-0 keys, in units of the dtype's
ulp at each token-head's scale, and relative Frobenius over all layers), the full-rank patch
identity (KL / KL_blind) and blind KL; then the attention kernels that load. Everything here also
runs on CPU (``--device cpu``), which is how it is tested; on a GPU run it before trusting bf16 or
flash-attention numbers, then ``scripts/bench_reuse.py --device cuda --dtype bf16`` for timing.

    python scripts/gpu_check.py --device cuda
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from PIL import Image

from kamera.context import ReuseContext
from kamera.core import relocate
from kamera.metrics import kl
from kamera.models import load_model, model_names
from kamera.spans import Span


def image(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (112, 112, 3), dtype=np.uint8))


def spans(text_only: bool) -> list[Span]:
    def chunk(role: str, k: int) -> Span:
        return Span(role, (f"object {k} has colour {k}.",) if text_only else (image(k), f"caption {k}"))

    return [Span("prefix", ("Answer with a letter.",)), chunk("A", 0), chunk("A", 1), chunk("B", 2),
            Span("query", ("Which colour? Answer:",))]


def ulps(err: torch.Tensor, target: torch.Tensor, mantissa_bits: int) -> float:
    scale = torch.exp2(torch.floor(torch.log2(target.abs().amax(-1, keepdim=True).clamp_min(1e-30))) - mantissa_bits)
    return float((err / scale).max())


def check(name: str, dtype: str, device: str, attn: str) -> str:
    adapter = load_model(name, dtype=dtype, device=device, attn_implementation=attn)
    text_only = adapter.family in ("deepseek_v2", "deepseek_v3")
    b = adapter.encode_span(spans(text_only)[3])
    k = next(i for i, s in enumerate(adapter.specs) if s.rotary is not None)
    bits = {"float32": 23, "bfloat16": 7, "float16": 10}[dtype]
    base_out = adapter.forward([(b, 0)])
    base = adapter.read(base_out.cache, 0, b.n_tokens, b.local_pos)
    worst_ulp, worst_rel = 0.0, 0.0
    for delta in (1, 100, 3000):
        out = adapter.forward([(b, delta)])
        target = adapter.read(out.cache, 0, b.n_tokens, b.local_pos + delta)
        moved = relocate(base, delta)
        t0, m0 = target.layers[0][k].float(), moved.layers[0][k].float()
        worst_ulp = max(worst_ulp, ulps((m0 - t0).abs(), t0, bits))
        worst_rel = max(worst_rel, *(float((m[k].float() - t[k].float()).norm() / t[k].float().norm())
                                     for m, t in zip(moved.layers, target.layers, strict=True)))
    ctx = ReuseContext(adapter, spans(text_only))
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    kl_full = kl(ctx.reprefill_logits, ctx.query(ctx.patch.apply(ctx.relocated)).logits)
    return (f"{name:18s} {dtype:9s} {attn:18s} reloc L0 {worst_ulp:5.1f} ulp  all-layers rel {worst_rel:.1e}  "
            f"KL_blind {kl_blind:.2e}  full-rank KL/KL_blind {kl_full / max(kl_blind, 1e-30):.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--models", nargs="+", default=model_names("tiny"))
    args = ap.parse_args()
    print(f"torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else ""))
    kernels = ["sdpa", "eager"]
    try:
        import flash_attn  # noqa: F401

        kernels.append("flash_attention_2")
    except ImportError:
        print("flash-attn not installed: skipping the flash_attention_2 path (pip install -e '.[gpu]')")
    t0 = time.perf_counter()
    for name in args.models:
        for dtype in args.dtypes:
            for attn in [k for k in kernels if not (k == "flash_attention_2" and dtype == "float32")]:
                try:
                    print(check(name, dtype, args.device, attn), flush=True)
                except Exception as err:  # report and go on: one family's failure must not hide the others
                    print(f"{name:18s} {dtype:9s} {attn:18s} FAILED: {type(err).__name__}: {err}", flush=True)
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
