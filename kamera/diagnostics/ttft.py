"""Fig. 11(b, c): time to first token, recompute vs reuse, as the reused segment grows; and amortisation.

One item per segment length: a prefix, an antecedent A (one frame), the reused segment B (frames
whose visual tokens add up to about ``n`` tokens) and a one-line query. On it (medians of
``repeats`` timed calls after one warm-up):

    vision_ms       the vision encoder over B's frames (the embeddings a recompute re-derives)
    prefill_ms      B's prefill in context plus the query: one forward over [B · query] on a cache
                    holding [prefix · A] (the per-reuse cost of a cache that cannot relocate)
    recompute_ms    vision_ms + prefill_ms (full recompute, the vision encoder re-run)
    apply_ms        relocate + patch apply at rank m: R(δ)·KV(B|∅) + (UΣ)_m V_mᵀ
    reuse_ms        apply_ms's work, then the query on the spliced cache [prefix · A · B]
    canonical_ms, conditioned_ms, svd_ms, form_ms
                    forming, once per chunk and antecedent: B prefilled behind the prefix (the stored
                    canonical), the conditioned forward over [prefix · A · B], Δ and its full SVD;
                    form_ms is their sum (everything reuse needs before its first apply, the vision
                    encoder aside)
    speedup_prefill, speedup_recompute   prefill_ms / reuse_ms and recompute_ms / reuse_ms

Fig. 11(c)'s cost model (:func:`cumulative`): after N reuses Kamera has spent form + N·reuse, a
prefill-per-reuse cache N·prefill, full recompute N·(vision + prefill); the break-even N is the
smallest N ≥ 1 with form + N·reuse ≤ N·baseline, ⌈form / (baseline − reuse)⌉ (none if reuse is not
cheaper). The paper's numbers (1.8× → 29×, break-even ≈ 9) are H100 bf16 inside SGLang; a CPU run
prints its own device beside every figure and is not a reproduction. On CUDA the same code times
with CUDA events.

    python -m kamera.diagnostics.ttft                                  # CPU, float32, bench_vl
    python -m kamera.diagnostics.ttft --device cuda --dtype bf16       # GPU, CUDA events
    python -m kamera.diagnostics.ttft --model qwen2_5_vl_7b --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import transformers as tf
from PIL import Image

from kamera.core import Patch, default_rotary_rank, deficit, relocate
from kamera.core.precision import DTYPES
from kamera.diagnostics.records import cumulative
from kamera.discover import paper_block
from kamera.items.spans import Span
from kamera.knobs import check_counts
from kamera.models import load_model
from kamera.models.base import Adapter, place
from kamera.models.qwen_vl import QwenVLAdapter
from kamera.models.tiny import SPECIAL_IDS, TEXT
from kamera.models.tokenizer import ByteTokenizer
from kamera.progress import Progress
from kamera.reuse.context import ReuseContext

SIZES = (256, 512, 1024, 2048)
RANKS = (16, 64)
BENCH_MODEL = "bench_vl"


# ----- timing ------------------------------------------------------------------------------------
class Clock:
    """Median wall time of a call in ms: CUDA events on a GPU, ``time.perf_counter`` on CPU."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("CUDA timing asked for but torch sees no GPU")
        self.name = "cuda-events" if self.device.type == "cuda" else "perf_counter"

    def _once(self, fn: Callable[[], object]) -> float:
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(self.device)
            return float(start.elapsed_time(end))
        t0 = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t0)

    def __call__(self, fn: Callable[[], object], repeats: int) -> float:
        self._once(fn)  # warm-up (kernels, allocator)
        return statistics.median(self._once(fn) for _ in range(repeats))


# ----- the item --------------------------------------------------------------------------------
def frame(seed: int, px: int) -> Image.Image:
    """A deterministic noise frame of px × px pixels."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (px, px, 3), dtype=np.uint8))


def segment_spans(adapter: Adapter, n_visual: int, frame_px: int = 448) -> list[Span]:
    """[prefix, A (one frame), B (frames totalling ≈ n_visual visual tokens), query]."""
    if not adapter.reads_images:
        raise ValueError(f"{adapter.name} is text-only; the TTFT figure needs a vision encoder")
    per_frame = int(adapter.encode_span(Span("B", (frame(0, frame_px),))).visual.sum())
    k = max(1, round(n_visual / per_frame))
    b = tuple(part for i in range(k) for part in (f"frame {i}", frame(1 + i, frame_px)))
    return [Span("prefix", ("Watch the clip.",)), Span("A", ("earlier", frame(10_000, frame_px))),
            Span("B", b), Span("query", ("What happens next? Answer:",))]


def time_item(ctx: ReuseContext, ranks: Sequence[int], clock: Clock, repeats: int) -> list[dict]:
    """Every timing of the module docstring on one item; records as :func:`ttft` documents."""
    if not ctx.has_prefix or ctx.canonical_context != "prefix":
        raise ValueError("time_item needs an item with a prefix and the default canonical_context='prefix'")
    a = ctx.adapter
    b, q = ctx.enc.spans[ctx.b], ctx.enc.spans[ctx.q]

    def prefill():
        return a.forward([(b, ctx.b_start), (q, ctx.start(ctx.q))], cache=a.cache(ctx.context_kv), tag="ttft")

    def conditioned():
        out = a.forward(place(ctx.enc.spans[: ctx.b + 1], ctx.offset), tag="ttft")
        z = out.cache.get_seq_length()
        return a.read(out.cache, z - b.n_tokens, z, ctx.native_positions(ctx.b))

    def canonical():  # the forward ReuseContext.canonical runs: B behind the prefix's KV
        return a.forward([(b, ctx.canonical_start)], cache=a.cache(ctx.context_kv[:1]), tag="ttft")

    kv_b = conditioned()
    t = {
        "vision_ms": clock(lambda: a.encode_span(b.span), repeats),
        "prefill_ms": clock(prefill, repeats),
        "canonical_ms": clock(canonical, repeats),
        "conditioned_ms": clock(conditioned, repeats),
        "svd_ms": clock(lambda: Patch.form(deficit(kv_b, relocate(ctx.canonical, ctx.delta)), dtype=a.dtype), repeats),
    }
    t["recompute_ms"] = t["vision_ms"] + t["prefill_ms"]
    t["form_ms"] = t["canonical_ms"] + t["conditioned_ms"] + t["svd_ms"]
    n_frames = sum(isinstance(p, Image.Image) for p in b.span.parts)
    keys = {"device": str(clock.device), "dtype": str(a.dtype).removeprefix("torch."), "timer": clock.name,
            "n_b": ctx.n_b, "n_visual": int(b.visual.sum()), "n_frames": n_frames}
    out = [{**keys, "rank": None, "quantity": k, "value": v} for k, v in t.items()]
    for m in ranks:
        patch = ctx.patch.truncate(m, default_rotary_rank(m, a.attention))  # the patch arm's ranks
        apply_ms = clock(lambda p=patch: p.apply(ctx.canonical, ctx.delta), repeats)  # relocation fused in
        reuse_ms = clock(lambda p=patch: ctx.query(p.apply(ctx.canonical, ctx.delta), tag="ttft"), repeats)
        for k, v in {"apply_ms": apply_ms, "reuse_ms": reuse_ms, "speedup_prefill": t["prefill_ms"] / reuse_ms,
                     "speedup_recompute": t["recompute_ms"] / reuse_ms}.items():
            out.append({**keys, "rank": m, "quantity": k, "value": v})
    return out


def ttft(adapter: Adapter, sizes: Sequence[int] = SIZES, ranks: Sequence[int] = RANKS, repeats: int = 3,
         frame_px: int = 448, progress: Callable[[str], None] | None = None) -> list[dict]:
    """Fig. 11(b) timings per segment length (``progress``, if given, receives a done / total line per segment).

    Records: ``{device, dtype, timer, n_b, n_visual, n_frames, rank, quantity, value}``; ``rank`` is set
    for apply_ms, reuse_ms and the speedups, None otherwise; times in ms."""
    sizes, ranks = check_counts("ttft", "sizes", sizes), check_counts("ttft", "ranks", ranks)
    (repeats,) = check_counts("ttft", "repeats", [repeats])
    clock = Clock(adapter.device)
    meter = Progress(len(sizes), what="segments")
    out = []
    for n in sizes:
        ctx = ReuseContext(adapter, segment_spans(adapter, n, frame_px))
        out += time_item(ctx, ranks, clock, repeats)
        line = meter.step(f"n_B = {ctx.n_b} timed")  # the ETA assumes equal segments; later ones are longer
        if progress:
            progress(line)
    return out


# ----- the script --------------------------------------------------------------------------------
def bench_vl(device: str = "cpu", dtype: torch.dtype = torch.float32) -> QwenVLAdapter:
    """A random mid-size Qwen2.5-VL: the decoder of ``make bench`` (hidden 1024, 8 layers, GQA 4 × 128,
    K/V width 512) behind a 4-block vision tower; one 448-px frame is 256 visual tokens."""
    torch.manual_seed(0)
    cfg = tf.Qwen2_5_VLConfig(
        text_config=dict(
            TEXT, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=8,
            num_key_value_heads=4, max_position_embeddings=32768,
            rope_parameters=dict(rope_type="default", rope_theta=1e6, mrope_section=[16, 24, 24]),
        ),
        vision_config=dict(depth=4, hidden_size=256, intermediate_size=1024, num_heads=4, out_hidden_size=1024,
                           patch_size=14, window_size=112, fullatt_block_indexes=[3]),
        **SPECIAL_IDS,
    )
    model = tf.Qwen2_5_VLForConditionalGeneration._from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    processor = tf.Qwen2VLImageProcessorPil(patch_size=14, merge_size=2, temporal_patch_size=2,
                                            min_pixels=28 * 28, max_pixels=448 * 448)
    return QwenVLAdapter(model.to(device), ByteTokenizer(), processor, name=BENCH_MODEL)


def _count(n: float) -> str:
    return "never" if math.isnan(n) else f"{n:.0f}"


def table(records: Sequence[dict], ranks: Sequence[int]) -> str:
    """The timings and break-even N as a fixed-width table (one line per segment length)."""
    cum = {(r["n_b"], r["rank"], r["quantity"]): r["value"] for r in cumulative(records) if r["n_reuse"] is None}
    t = {(r["n_b"], r["rank"], r["quantity"]): r["value"] for r in records}
    sizes = sorted({r["n_b"] for r in records})
    head = f"{'n_B':>5} {'vision':>8} {'prefill':>9} {'form':>9}"
    for m in ranks:
        head += f" | r{m:<3} {'apply':>7} {'reuse':>8} {'×prefill':>8} {'×recomp':>8} {'N*pre':>5} {'N*rec':>5}"
    lines = [head]
    for n in sizes:
        line = (
            f"{n:>5} {t[(n, None, 'vision_ms')]:>8.1f} {t[(n, None, 'prefill_ms')]:>9.1f}"
            f" {t[(n, None, 'form_ms')]:>9.1f}"
        )
        for m in ranks:
            line += (
                f" | {'':<4} {t[(n, m, 'apply_ms')]:>7.2f} {t[(n, m, 'reuse_ms')]:>8.1f}"
                f" {t[(n, m, 'speedup_prefill')]:>7.1f}× {t[(n, m, 'speedup_recompute')]:>7.1f}×"
                f" {_count(cum[(n, m, 'break_even_prefill')]):>5} {_count(cum[(n, m, 'break_even_recompute')]):>5}"
            )
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description="Fig. 11(b, c): TTFT of recompute vs reuse, and break-even N.")
    ap.add_argument("--model", default=BENCH_MODEL, help=f"{BENCH_MODEL} (random, built here) or a registered model")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="segment lengths in visual tokens")
    ap.add_argument("--ranks", type=int, nargs="+", default=list(RANKS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--frame-px", type=int, default=448, help="frame side in pixels")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    ap.add_argument("--out", type=Path, default=None, help="also write the ttft and cumulative records here (JSON)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    Clock(args.device)  # fail on a missing GPU before building anything
    dtype = DTYPES[args.dtype]
    adapter = (
        bench_vl(args.device, dtype)
        if args.model == BENCH_MODEL
        else load_model(args.model, dtype=dtype, device=args.device)
    )
    records = ttft(adapter, args.sizes, args.ranks, args.repeats, args.frame_px, progress=print)
    device = torch.cuda.get_device_name(adapter.device) if adapter.device.type == "cuda" else "CPU"
    print(
        f"\n{device} ({records[0]['timer']}), {args.dtype}, model {adapter.name}; median of {args.repeats}; "
        f"times in ms{'' if adapter.device.type == 'cuda' else ' — CPU timings, not the paper H100 comparison'}"
    )
    print(table(records, args.ranks))
    paper = paper_block("fig11")
    speedup = paper["speedup"]
    print(
        "×prefill = prefill / reuse TTFT; ×recomp = (vision + prefill) / reuse; N*pre / N*rec = break-even reuses "
        f"against a prefill (recompute) per reuse. Paper (H100, Fig. 11 b, c): ×prefill {speedup[256]:g}× at 256 → "
        f"{speedup[2048]:g}× at 2048, break-even {paper['break_even']}."
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"ttft": records, "cumulative": cumulative(records)}, indent=1))
        print(f"records → {args.out}")
    return records


if __name__ == "__main__":
    main()
