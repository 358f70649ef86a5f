"""Benchmark: B's prefill in context vs the forward-free reuse operator (relocate + rank-m patch).

Prints, per chunk length n_B, the median time of (1) prefilling B behind a cached context and
(2) R(δ) on B's canonical keys plus applying a rank-m patch, their ratio, and the patch's bytes as
a fraction of B's page. The model is a mid-size random Qwen2-style GQA decoder (hidden 1024,
8 layers, 8 heads of 128, 4 KV heads: K/V width 512, the paper's GQA-512 page), so the ratio is
about the operator, not about any checkpoint. The paper's 1.8× → 29× (256 → 2048 tokens) is an
H100 TTFT figure; CPU numbers are printed beside it for orientation, not as a reproduction.

    python scripts/bench_reuse.py                       # CPU, fp32
    python scripts/bench_reuse.py --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers as tf

from kamera.core import Patch, deficit, relocate
from kamera.models.base import place
from kamera.models.registry import DTYPES
from kamera.models.text import TextAdapter
from kamera.models.tokenizer import ByteTokenizer
from kamera.spans import Span

PAPER_RATIO = {256: 1.8, 2048: 29.0}  # Fig. 11b endpoints (H100, prefill-only TTFT)


def build(device: str, dtype: torch.dtype) -> TextAdapter:
    torch.manual_seed(0)
    cfg = tf.Qwen2Config(
        vocab_size=512, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=4, head_dim=128, max_position_embeddings=16384,
    )
    model = tf.Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=dtype).to(device)
    return TextAdapter(model, ByteTokenizer(), name="bench_gqa512")


def timed(fn, repeats: int, sync) -> float:
    fn()  # warm-up
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--ranks", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--context", type=int, default=256, help="tokens of cached context before B")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    args = ap.parse_args()

    adapter = build(args.device, DTYPES[args.dtype])
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    print(f"model: hidden 1024, 8 layers, GQA 4×128 (width 512), {args.dtype} on {args.device}; "
          f"context {args.context} tokens; median of {args.repeats}")
    head = f"{'n_B':>6} {'prefill ms':>11}"
    for m in args.ranks:
        head += f" {'r' + str(m) + ' ms':>9} {'ratio':>7} {'bytes':>6}"
    print(head + f" {'paper ratio':>12}")
    gen = torch.Generator().manual_seed(0)
    for n in args.sizes:
        text = "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (n,), generator=gen))
        ctx_text = "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (args.context,), generator=gen))
        enc = adapter.encode([Span("A", (ctx_text,)), Span("B", (text,)), Span("query", ("?",))])
        a, b = enc.spans[0], enc.spans[1]
        full = adapter.forward(place([a, b]))
        context = adapter.read(full.cache, 0, a.n_tokens, a.local_pos)
        conditioned = adapter.read(full.cache, a.n_tokens, a.n_tokens + n, b.local_pos + a.extent)
        solo = adapter.forward([(b, 0)])
        canonical = adapter.read(solo.cache, 0, n, b.local_pos)
        patch = Patch.form(deficit(conditioned, relocate(canonical, a.extent)), dtype=adapter.dtype)

        def prefill(b=b, start=a.extent, context=context):
            adapter.forward([(b, start)], cache=adapter.cache([context]))

        def reuse(p, canonical=canonical, delta=a.extent):
            p.apply(relocate(canonical, delta))

        t_prefill = timed(prefill, args.repeats, sync)
        row = f"{n:>6} {1e3 * t_prefill:>11.1f}"
        for m in args.ranks:
            p = patch.truncate(m)
            t_reuse = timed(lambda p=p: reuse(p), args.repeats, sync)
            row += f" {1e3 * t_reuse:>9.2f} {t_prefill / t_reuse:>6.1f}× {p.bytes_fraction(conditioned):>6.1%}"
        paper = PAPER_RATIO.get(n)
        print(row + (f" {paper:>11.1f}×" if paper else f" {'':>12}"))
    print("ratio = prefill time / (relocate + patch) time; bytes = rank-m patch as a fraction of B's K/V page")


if __name__ == "__main__":
    main()
