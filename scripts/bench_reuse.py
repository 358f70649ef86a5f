"""Benchmark: the reuse operator against B's prefill and against a minimal rotate + GEMM reference.

For each chunk length n_B and patch rank m it prints the median time of

- ``prefill``: B prefilled behind a cached context (what reuse replaces);
- ``reference``: the least the operator can cost in plain torch on the very same tensors, per
  layer: R(δ) of the canonical keys written into a fresh tensor (cos / sin precomputed), the rank-m
  K patch added into it in place, and V + its patch as one out-of-place ``addmm`` (the stored
  canonical is never written);
- ``fused``: ``Patch.apply(canonical, δ)``, the harness's operator (Eq. 1 in one call);
- ``relocate+apply``: ``Patch.apply(relocate(canonical, δ))``, the two-call form the harness's
  arms use (relocation shared by every arm of an item), one extra pass over K;

then the ratios fused / reference (the operator's overhead over its memory traffic; the target is
≤ 1.2× at n_B = 2048), relocate+apply / reference, prefill / fused (the reuse speed-up), and the
patch's bytes as a fraction of B's page. Reference and operator are timed in alternation and each
ratio is the median of the per-pair ratios, so load on a shared machine cancels; before timing,
the fused output is checked against the reference's (they must agree to float rounding).

The model is a random Qwen2-style GQA decoder (hidden 1024, 8 layers, 8 heads of 128, 4 KV heads:
K / V width 512, the paper's GQA-512 page), so the numbers are about the operator, not a
checkpoint. The paper's prefill / reuse 1.8× → 29.3× (256 → 2048 tokens, Fig. 11b; its one place is
conf/experiment/fig11.yaml's paper: block) is an H100 TTFT
figure; CPU numbers are printed beside it for orientation only. On CUDA every interval is timed
with CUDA events. In bf16 the reference rotates in bf16 arithmetic, while the operator rotates in
float32 and rounds once (exact to the storage dtype), so its ratio there also prices that
precision.

    python scripts/bench_reuse.py --threads 1                  # CPU, fp32
    python scripts/bench_reuse.py --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch
import transformers as tf

from kamera.core import ChunkKV, Patch, deficit, relocate
from kamera.core.rope import rotation_angles
from kamera.discover import paper_block
from kamera.items.spans import Span
from kamera.models import DTYPES
from kamera.models.base import place
from kamera.models.text import TextAdapter
from kamera.models.tokenizer import ByteTokenizer


def build(device: str, dtype: torch.dtype) -> TextAdapter:
    torch.manual_seed(0)
    cfg = tf.Qwen2Config(
        vocab_size=512, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=4, head_dim=128, max_position_embeddings=16384,
    )
    model = tf.Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=dtype).to(device)
    return TextAdapter(model, ByteTokenizer(), name="bench_gqa512")


class Clock:
    """Seconds one call takes: CUDA events on a GPU (the stream's own time), perf_counter on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def alternate(clock: Clock, ref: Callable, ours: Callable, repeats: int) -> tuple[float, float, float]:
    """(median reference s, median ours s, median of per-pair ours / reference), run in alternating order."""
    ref(), ours()  # warm-up: allocator, cos / sin tables, BLAS
    pairs = []
    for i in range(repeats):
        if i % 2:
            t_ours, t_ref = clock(ours), clock(ref)
        else:
            t_ref, t_ours = clock(ref), clock(ours)
        pairs.append((t_ref, t_ours))
    return (statistics.median(r for r, _ in pairs), statistics.median(o for _, o in pairs),
            statistics.median(o / r for r, o in pairs))


def minimal_reference(canonical: ChunkKV, patch: Patch, delta: int) -> Callable[[], list]:
    """Rotate + GEMM on the canonical's tensors and the patch's own factor views, nothing else."""
    k_i = next(i for i, s in enumerate(canonical.specs) if s.rotary is not None)
    v_i = next(i for i, s in enumerate(canonical.specs) if s.rotary is None)
    spec_k, rot = canonical.specs[k_i], canonical.specs[k_i].rotary
    if rot.layout != "half" or rot.rotary_dim != spec_k.dim:
        raise ValueError("the reference is written for full-width rotate-half keys (the bench model's)")
    k0 = canonical.layers[0][k_i]
    h, dtype, device = rot.rotary_dim // 2, k0.dtype, k0.device
    cos, sin = (t.to(device, dtype) for t in rotation_angles(delta, rot))
    mk, mv = patch.channel_rank(k_i), patch.channel_rank(v_i)
    layers = [(chans[k_i], chans[v_i], patch.factors[l][k_i][0], patch.factors[l][v_i][0])
              for l, chans in enumerate(canonical.layers)]

    def run() -> list:
        out = []
        for k, v, fk, fv in layers:
            n = k.shape[0]
            kr = torch.empty_like(k)
            x1, x2, o1, o2 = k[..., :h], k[..., h:], kr[..., :h], kr[..., h:]
            torch.mul(x1, cos, out=o1)
            o1.addcmul_(x2, sin, value=-1)
            torch.mul(x2, cos, out=o2)
            o2.addcmul_(x1, sin)
            kr.view(n, -1).addmm_(fk.us[:, :mk], fk.vt[:mk])
            out.append((kr, torch.addmm(v.view(n, -1), fv.us[:, :mv], fv.vt[:mv]).view(v.shape)))
        return out

    return run


def check_agree(fused: ChunkKV, ref: list, dtype: torch.dtype) -> None:
    """The timed operator computes what the reference computes (to the storage dtype's rounding)."""
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for lf, (k, v) in zip(fused.layers, ref, strict=True):
        for a, b in zip(lf, (k, v), strict=True):
            err = float((a.float() - b.float()).abs().max() / b.float().abs().max())
            if err > tol:
                raise SystemExit(f"the fused operator and the reference disagree: max relative error {err:.2e} > {tol}")


def measure(adapter: TextAdapter, clock: Clock, n: int, args: argparse.Namespace, gen: torch.Generator) -> None:
    """Print one row per rank for chunk length ``n``."""
    text = "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (n,), generator=gen))
    ctx_text = "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (args.context,), generator=gen))
    enc = adapter.encode([Span("A", (ctx_text,)), Span("B", (text,)), Span("query", ("?",))])
    a, b = enc.spans[0], enc.spans[1]
    full = adapter.forward(place([a, b]))
    context = adapter.read(full.cache, 0, a.n_tokens, a.local_pos)
    conditioned = adapter.read(full.cache, a.n_tokens, a.n_tokens + n, b.local_pos + a.extent)
    canonical = adapter.read(adapter.forward([(b, 0)]).cache, 0, n, b.local_pos)
    delta = a.extent
    patch = Patch.form(deficit(conditioned, relocate(canonical, delta)), dtype=adapter.dtype)

    def prefill() -> None:
        adapter.forward([(b, delta)], cache=adapter.cache([context]))

    prefill()
    t_prefill = statistics.median(clock(prefill) for _ in range(args.repeats))
    for m in args.ranks:
        p = patch.truncate(m)
        ref = minimal_reference(canonical, p, delta)
        check_agree(p.apply(canonical, delta), ref(), adapter.dtype)
        t_ref, t_fused, fused_ratio = alternate(clock, ref, partial(p.apply, canonical, delta), args.op_repeats)
        *_, two_ratio = alternate(clock, ref, lambda p=p: p.apply(relocate(canonical, delta)), args.op_repeats)
        paper = paper_block("fig11")["speedup"].get(n) if m == args.ranks[0] else None
        print(f"{n:>5} {m:>4} {1e3 * t_prefill:>10.1f} {1e3 * t_ref:>7.2f} {1e3 * t_fused:>8.2f} "
              f"{fused_ratio:>8.2f}× {two_ratio:>14.2f}× {t_prefill / t_fused:>12.1f}× "
              f"{p.bytes_fraction(conditioned):>6.1%} {f'{paper:.1f}×' if paper else '':>6}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--ranks", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--context", type=int, default=256, help="tokens of cached context before B")
    ap.add_argument("--repeats", type=int, default=5, help="timed prefills per n_B")
    ap.add_argument("--op-repeats", type=int, default=41, help="timed (reference, operator) pairs per cell")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = ap.parse_args()
    if min(args.sizes) < 1 or min(args.ranks) < 0 or args.repeats < 1 or args.op_repeats < 1:
        ap.error("sizes and repeats must be positive, ranks non-negative")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
    if args.threads:
        torch.set_num_threads(args.threads)
    adapter = build(args.device, DTYPES[args.dtype])
    clock = Clock(device)
    where = (f"{torch.cuda.get_device_name(device)} (CUDA events)" if clock.cuda
             else f"CPU, {torch.get_num_threads()} thread(s) (perf_counter)")
    print(f"model: hidden 1024, 8 layers, GQA 4×128 (K/V width 512), {args.dtype} on {where}; context "
          f"{args.context} tokens; prefill median of {args.repeats}, operator median of {args.op_repeats} pairs")
    print(f"{'n_B':>5} {'rank':>4} {'prefill ms':>10} {'ref ms':>7} {'fused ms':>8} {'fused/ref':>9} "
          f"{'reloc+apply/ref':>15} {'prefill/fused':>13} {'bytes':>6} {'paper':>6}")
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for n in args.sizes:
            measure(adapter, clock, n, args, gen)
    print("fused/ref: Patch.apply(canonical, δ) over the minimal rotate + GEMM on the same tensors (target ≤ 1.2×); "
          "prefill/fused: the reuse speed-up; bytes: the rank-m patch as a fraction of B's K/V page")


if __name__ == "__main__":
    main()
