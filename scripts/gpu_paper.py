"""The paper's GPU claims in one run on one lent GPU: ``scripts/gpu_check.py --paper`` (docs/gpu.md).

Every model is built from a paper model's published config (kamera/models/shaped/configs) with random bf16
weights made directly on the device by transformers' own initialiser (no checkpoint on disk, no tokenizer: byte
ids), and driven through kamera's Python API (ReuseContext, Patch, relocate); nothing here imports Hydra. The
sections run in this order; each one's records go to <out>/gpu_check.json and its table to <out>/gpu_check.md as
soon as it ends, so a run cut short keeps what it measured:

    env         torch / transformers / CUDA versions, the GPU, its device-to-device copy rate (bytes read + written)
    ttft        Fig. 11(b) on Qwen2.5-VL-7B's text stack at full depth: per n_B, the prefill of [B · query] behind a
                cached [prefix · A] against reuse (R(δ) and the rank-m patch in one apply, then the query forward),
                medians of ``repeats`` timed calls after warm-ups (CUDA events); the apply's achieved bandwidth
                (the fewest bytes it must move over its time) beside the copy rate; the one-time forming cost
                and the break-even number of reuses (Fig. 11(c))
    identities  on that model and item: rank 0 = blind (B's KV bit for bit, the logits' KL ≤ 1e-9), full rank =
                re-prefill (KL at most 10× the splice's own floor — B's exact conditioned KV spliced — or 100×
                below blind), and the share of B's K / V within one bf16 ULP of KV(B|A) (Fig. 12(a))
    kernels     the same identities with each SDPA backend forced alone (flash, efficient, cuDNN, math) and with
                eager attention (flash-attn 2 too where installed), on an item whose forwards need no mask (B
                canonical alone, a one-token query); a backend that cannot run is reported, not failed (math and
                eager run everywhere: there it is a failure)
    relocation  Fig. 12(b): R(δ) against the model's own rotary per M-RoPE layout and base — Qwen2.5-VL
                (sectioned, θ 1e6), Qwen3-VL (interleaved, 5e6), Qwen3-Omni (interleaved, 1e6) — with B on an
                image's t / h / w grid: relative error per layer, layer 0's keys in bf16 ULPs (max, share ≤ 1)
    mla         Kimi-VL's MLA stack (DeepSeek-V3, 64 experts) at full depth: TTFT, identities and relocation,
                when the time budget leaves room for it (and it fits in memory)

``--tiny`` runs every section on the models' tiny twins at short lengths: the CPU rehearsal of this run
(``make device-rehearsal``). Exit status 1 when an identity breaks (layer-0 relocation error above 2⁻⁶ at
δ ≤ 10,000 included).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import platform
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers as tf
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers.initialization import no_init_weights

from kamera.core import ChunkKV, Patch, family_rank_view, relocate
from kamera.diagnostics.common import frobenius, relative
from kamera.diagnostics.records import break_even
from kamera.diagnostics.relocation import DISTANCES, prefill_alone, relocation_error, rope_scheme
from kamera.diagnostics.ttft import Clock
from kamera.discover import paper_block
from kamera.items.spans import Span
from kamera.metrics import bf16_ulps, bf16_vector_ulps, kl
from kamera.models import entry, load_model
from kamera.models.base import Adapter, EncodedSpan
from kamera.models.kimi_vl import native_config
from kamera.models.shaped import shaped_writer
from kamera.models.tokenizer import ByteTokenizer
from kamera.reuse.context import ReuseContext

SECTIONS = ("ttft", "identities", "kernels", "relocation", "mla")
MODELS = {  # role: (paper model, its tiny twin)
    "gqa": ("qwen2_5_vl_7b", "tiny_qwen2_5_vl"),
    "interleaved": ("qwen3_vl_8b", "tiny_qwen3_vl"),
    "omni": ("qwen3_omni_30b_a3b", "tiny_qwen3_omni"),
    "mla": ("kimi_vl_a3b", "tiny_kimi"),
}
NATIVE_CONFIG = {"kimi_vl_a3b": native_config}  # Hub configs of remote-code models → the native classes' config
BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
EVERYWHERE = ("sdpa math", "eager")  # kernels every device runs: one that does not is a failure, not a fact
RANK0_KL = 1e-9  # rank 0 reuses blind's very KV: its logits differ from blind's by nothing but kernel nondeterminism
FULL_OVER_FLOOR, FULL_UNDER_BLIND, KL_ABS = 10.0, 100.0, 1e-9
RELOC_BOUND, RELOC_GATED = 2.0**-6, 10_000  # layer-0 relative error allowed at δ ≤ RELOC_GATED (bf16 rounds at 2⁻⁸)
PAPER_KL_PATCH = 1e-3  # Fig. 12(a): the reconstructed KV's residual next-token KL, live engine


@dataclass(frozen=True)
class Plan:
    """How much each section measures: segment lengths n_B, patch ranks, timed repeats, A's length, the relocation
    grid's side, the relocation-only models' decoder layers, the copy buffer, and the time reserved for ``mla``."""

    sizes: tuple[int, ...]
    ranks: tuple[int, ...]
    repeats: int
    context: int
    grid: int
    layers: int
    copy_bytes: int
    mla_reserve_s: float


PAPER_PLAN = Plan(sizes=(256, 512, 1024, 2048), ranks=(16, 64), repeats=10, context=256, grid=16, layers=2,
                  copy_bytes=2 << 30, mla_reserve_s=150.0)
TINY_PLAN = Plan(sizes=(16, 32), ranks=(4, 8), repeats=2, context=24, grid=4, layers=2, copy_bytes=16 << 20,
                 mla_reserve_s=0.0)
WARMUPS = 2  # untimed calls before a Clock (which adds one of its own)


# ----- the models --------------------------------------------------------------------------------------------
def published_depth(name: str) -> int:
    """The decoder depth of paper model ``name`` as its published config states it."""
    spec = shaped_writer(name).spec
    node = spec.config
    for key in spec.text_layers[0].split("."):
        node = node[key]
    return int(node)


def published(name: str, layers: int | None, device: str, dtype: torch.dtype, attn: str = "sdpa", seed: int = 0,
              init: bool = True) -> Adapter:
    """Paper model ``name`` from its published config with random weights made on ``device`` (transformers' own
    initialiser, seeded): ``layers`` decoder layers (None: the published depth) and the fewest vision layers the
    model runs with, since text spans never reach the tower. Byte-level ids, no processor. ``init=False`` leaves
    the weights unset: a check of the structure only, never to run."""
    e, spec = entry(name), shaped_writer(name).spec
    cfg = spec.shaped_config(layers or published_depth(name), spec.min_vision_layers)
    config = NATIVE_CONFIG[name](cfg) if name in NATIVE_CONFIG else tf.AutoConfig.for_model(**cfg)
    for key, value in spec.build_overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    with torch.device(device), (nullcontext() if init else no_init_weights()):
        model = getattr(tf, e.model_class)._from_config(config, dtype=dtype, attn_implementation=attn)
    return e.adapter(getattr(model, e.submodule) if e.submodule else model, ByteTokenizer(), None, name=name)


def rope_theta(adapter: Adapter) -> float | None:
    return (getattr(adapter.text_config, "rope_parameters", None) or {}).get("rope_theta")


def structure(adapter: Adapter, built: str) -> dict:
    """What the measurements rest on: the model, how it was built, its depth, cache channels and rotary scheme."""
    return {"model": adapter.name, "built": built, "layers": adapter.n_layers, "attention": adapter.attention,
            "channels": ", ".join(f"{s.name} {s.heads}×{s.dim}" for s in adapter.specs), "scheme": rope_scheme(adapter),
            "theta": rope_theta(adapter)}


def published_structures() -> list[dict]:
    """Every paper model of the run built from its published config at one layer, weights unset (``--tiny``: the
    config conversions and adapters the GPU run builds, checked with this venv's transformers)."""
    out = []
    for paper, _ in MODELS.values():
        adapter = published(paper, 1, "cpu", torch.bfloat16, init=False)
        out.append(structure(adapter, f"structure only: 1 of {published_depth(paper)} layers, weights unset"))
        del adapter
        gc.collect()
    return out


def build(role: str, tiny: bool, layers: int | None, device: str) -> Adapter:
    """The role's paper model (``layers`` deep, None: full depth) or, with ``tiny``, its tiny twin; bf16."""
    paper, twin = MODELS[role]
    if tiny:
        return load_model(twin, dtype="bfloat16", device=device)
    return published(paper, layers, device, torch.bfloat16)


# ----- items ---------------------------------------------------------------------------------------------------
def letters(gen: torch.Generator, n: int) -> str:
    """n random lowercase letters: n byte tokens."""
    return "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (n,), generator=gen))


def item(n_b: int, context: int, gen: torch.Generator, query: str = "Which word came first? Answer:") -> list[Span]:
    """[prefix · A · B · query] with A ``context`` and B ``n_b`` byte tokens of random letters."""
    return [Span("prefix", ("Answer with one word.",)), Span("A", (letters(gen, context),)),
            Span("B", (letters(gen, n_b),)), Span("query", (query,))]


def grid_span(adapter: Adapter, side: int, gen: torch.Generator) -> EncodedSpan:
    """B as an image's side × side tokens: M-RoPE rows t = 0, h = row, w = column (1-D RoPE: 0 … n − 1), each token
    the embedding of a random id. Relocation must carry the positions exactly; the content is any."""
    n, dev = side * side, adapter.device
    ids = torch.randint(0, int(adapter.text_config.vocab_size), (n,), generator=gen).to(dev)
    k = torch.arange(n, device=dev)
    if adapter.position_rows == 3:
        pos, extent = torch.stack([torch.zeros_like(k), k // side, k % side]), side  # [3, n]: t, h, w
    else:
        pos, extent = k[None], n  # [1, n]
    return EncodedSpan(Span("B", (), "grid"), ids, adapter.embed(ids), pos, extent,
                       torch.zeros(n, dtype=torch.bool, device=dev))


# ----- measurements ----------------------------------------------------------------------------------------------
def sdpa_ops(fn: Callable[[], object]) -> list[str]:
    """The SDPA implementations (aten ops) a call ran: which attention kernel served it (eager attention runs none)."""
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            fn()
    except Exception as err:  # the profiler is a reading, never worth the section
        return [f"profiler failed: {type(err).__name__}"]
    return sorted({e.key for e in prof.key_averages() if e.key.startswith("aten::_scaled_dot_product")})


def timed(clock: Clock, fn: Callable[[], object], repeats: int) -> float:
    """Median ms of ``repeats`` calls of ``fn`` after ``WARMUPS`` untimed ones."""
    for _ in range(WARMUPS):
        fn()
    return clock(fn, repeats)


def copy_rate(device: str, nbytes: int, repeats: int) -> float:
    """Device-to-device copy rate in bytes / s, counting the bytes read and the bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 256)
    dst = torch.empty_like(src)
    ms = timed(Clock(device), lambda: dst.copy_(src), repeats)
    return 2 * nbytes / (ms / 1e3)


def apply_bytes(canonical: ChunkKV, patch: Patch, delta: int) -> int:
    """The fewest bytes ``patch.apply(canonical, δ)`` must move: every rotated or patched channel read once and
    written once, the rank-m factors read once (its achieved bandwidth is this over its time)."""
    total, patched = 0, set(patch.patched_layers)
    for l, chans in enumerate(canonical.layers):
        for c, (t, spec) in enumerate(zip(chans, canonical.specs, strict=True)):
            m = patch.channel_rank(c) if l in patched else 0
            if m or (delta and spec.rotary is not None):
                total += 2 * t.numel() * t.element_size()
            total += sum(b.nbytes(m) for b in patch.factors[l][c]) if m else 0
    return total


def synced(device: torch.device, fn: Callable[[], object]) -> float:
    """Seconds one call takes, the device synchronised after it (a one-off: forming a patch)."""
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def ttft(
    adapter: Adapter, plan: Plan, copy_bps: float, progress: Callable[[str], None] = print
) -> Iterator[list[dict]]:
    """Fig. 11(b, c) (module docstring): the records of one n_B at a time, one per rank, with the SDPA ops its prefill
    and its reuse ran; ``progress`` receives a line per n_B."""
    clock, gen = Clock(adapter.device), torch.Generator().manual_seed(0)
    for i, n in enumerate(plan.sizes, 1):
        ctx = ReuseContext(adapter, item(n, plan.context, gen))
        forward_s = synced(adapter.device, lambda ctx=ctx: (ctx.context_kv, ctx.canonical))
        svd_s = synced(adapter.device, lambda ctx=ctx: ctx.patch)
        b, q = ctx.enc.spans[ctx.b], ctx.enc.spans[ctx.q]

        def prefill(ctx=ctx, b=b, q=q):
            return adapter.forward(
                [(b, ctx.b_start), (q, ctx.start(ctx.q))], cache=adapter.cache(ctx.context_kv), tag="ttft"
            )

        def reuse(p: Patch, ctx=ctx):
            return ctx.query(p.apply(ctx.canonical, ctx.delta), tag="ttft")

        prefill_ms, out = timed(clock, prefill, plan.repeats), []
        for m in plan.ranks:
            p = family_rank_view(ctx.patch, m, adapter.attention)
            apply_ms = timed(clock, lambda p=p, ctx=ctx: p.apply(ctx.canonical, ctx.delta), plan.repeats)
            reuse_ms = timed(clock, lambda p=p: reuse(p), plan.repeats)
            nbytes, form_ms = apply_bytes(ctx.canonical, p, ctx.delta), 1e3 * (forward_s + svd_s)
            out.append(
                {
                    "model": adapter.name,
                    "n_b": ctx.n_b,
                    "rank": m,
                    "prefill_ms": prefill_ms,
                    "apply_ms": apply_ms,
                    "reuse_ms": reuse_ms,
                    "speedup": prefill_ms / reuse_ms,
                    "paper_speedup": paper_block("fig11")["speedup"].get(ctx.n_b),
                    "apply_bytes": nbytes,
                    "apply_bytes_per_s": nbytes / (apply_ms / 1e3),
                    "copy_bytes_per_s": copy_bps,
                    "form_ms": form_ms,
                    "form_svd_ms": 1e3 * svd_s,
                    "break_even": break_even(form_ms, reuse_ms, prefill_ms),
                }
            )
        progress(
            f"ttft {i}/{len(plan.sizes)}: n_B {ctx.n_b}, prefill {prefill_ms:.2f} ms, reuse {reuse_ms:.2f} ms "
            f"(rank {m}), forming {1e3 * (forward_s + svd_s):.0f} ms"
        )
        ops = {"sdpa_prefill": sdpa_ops(prefill), "sdpa_reuse": sdpa_ops(lambda p=p: reuse(p))}
        yield [r | ops for r in out]


def identities(ctx: ReuseContext) -> dict:
    """Rank 0 = blind and full rank = re-prefill on one item (module docstring), with the numbers behind them."""
    a = ctx.adapter
    ref, blind = ctx.reprefill_logits, ctx.blind.logits
    full = family_rank_view(ctx.patch, None, a.attention).apply(ctx.relocated)
    zero = family_rank_view(ctx.patch, 0, a.attention).apply(ctx.relocated)
    kl_blind = kl(ref, blind, what="re-prefill ‖ blind")
    kl_full = kl(ref, ctx.query(full, tag="full_rank").logits, what="re-prefill ‖ full-rank patch")
    kl_floor = kl(ref, ctx.query(ctx.conditioned, tag="exact_splice").logits, what="re-prefill ‖ KV(B|A) spliced")
    kl_zero = kl(blind, ctx.query(zero, tag="rank0").logits, what="blind ‖ rank-0 patch")
    same_kv = all(
        torch.equal(x, y)
        for lz, lr in zip(zero.layers, ctx.relocated.layers, strict=True)
        for x, y in zip(lz, lr, strict=True)
    )
    pairs = [
        (x, y) for lf, lc in zip(full.layers, ctx.conditioned.layers, strict=True) for x, y in zip(lf, lc, strict=True)
    ]
    share = float(torch.cat([(bf16_ulps(x, y) <= 1).flatten() for x, y in pairs]).double().mean())
    worst = max(float(bf16_vector_ulps(x, y).max()) for x, y in pairs)
    return {
        "model": a.name,
        "n_b": ctx.n_b,
        "delta": ctx.delta,
        "kl_blind": kl_blind,
        "kl_full": kl_full,
        "kl_splice_floor": kl_floor,
        "kl_rank0_vs_blind": kl_zero,
        "rank0_kv_equal": same_kv,
        "full_ulp_le1": share,
        "full_vector_ulp_max": worst,
        "rank0_ok": same_kv and kl_zero <= RANK0_KL,
        "full_ok": kl_full <= max(kl_blind / FULL_UNDER_BLIND, FULL_OVER_FLOOR * kl_floor, KL_ABS),
        "paper_kl_patch": PAPER_KL_PATCH,
    }


def kernels(adapter: Adapter, plan: Plan) -> list[dict]:
    """The identities under each attention kernel forced alone, on a mask-free item (module docstring)."""
    spans = item(plan.sizes[0], plan.context, torch.Generator().manual_seed(1), query="?")

    def under(label: str, scope) -> dict:
        try:
            with scope():
                return {
                    "kernel": label,
                    "ran": True,
                    **identities(ReuseContext(adapter, spans, canonical_context="none")),
                }
        except Exception as err:  # a kernel that cannot serve these forwards on this device: a fact to report,
            why = f"{type(err).__name__}: {(str(err) or '?').splitlines()[0]}"  # unless every device has it
            return {"kernel": label, "ran": False, "why": why, **({"ok": False} if label in EVERYWHERE else {})}

    out = [
        under(f"sdpa {name.lower()}", lambda name=name: sdpa_kernel([getattr(SDPBackend, name)])) for name in BACKENDS
    ]
    out.append(under("eager", lambda: adapter.attention_kernel("eager")))
    if importlib.util.find_spec("flash_attn") and adapter.device.type == "cuda":
        out.append(under("flash_attention_2", lambda: adapter.attention_kernel("flash_attention_2")))
    else:
        out.append({"kernel": "flash_attention_2", "ran": False, "why": "flash-attn is not installed (or no GPU)"})
    return out


def relocation(adapter: Adapter, plan: Plan) -> list[dict]:
    """Fig. 12(b) on ``adapter``: per δ, R(δ)·KV(B at 0) against KV(B at δ), B on an image grid (module docstring)."""
    span = grid_span(adapter, plan.grid, torch.Generator().manual_seed(2))
    k = next(c for c, s in enumerate(adapter.specs) if s.rotary is not None)
    distances = [d for d in DISTANCES if d + span.extent <= adapter.max_positions]
    rel = {
        (r["distance"], r["layer"]): r["value"]
        for r in relocation_error(adapter, span, distances)
        if r["quantity"] == "rel_err" and r["channel"] == adapter.specs[k].name
    }
    base = prefill_alone(adapter, span, 0)
    out = []
    for d in distances:
        moved, target = relocate(base, d).layers[0][k], prefill_alone(adapter, span, d).layers[0][k]
        err0 = relative(frobenius(moved.double() - target.double()), frobenius(target))
        out.append(
            {
                "model": adapter.name,
                "scheme": rope_scheme(adapter),
                "theta": rope_theta(adapter),
                "channel": adapter.specs[k].name,
                "distance": d,
                "rel_err_l0": err0,
                "rel_err_max_layer": max(v for (dd, _), v in rel.items() if dd == d),
                "ulp_le1_l0": float((bf16_ulps(moved, target) <= 1).double().mean()),
                "vector_ulp_max_l0": float(bf16_vector_ulps(moved, target).max()),
                "ok": d > RELOC_GATED or err0 <= RELOC_BOUND,
            }
        )
    return out


# ----- the report ----------------------------------------------------------------------------------------------
def _fmt(v, spec: str = ".3g") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def table(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]
    )


TABLES: dict[str, Callable[[list[dict]], str]] = {
    "env": lambda rs: table(["quantity", "value"], [[k, str(v)] for r in rs for k, v in r.items()]),
    "models": lambda rs: table(
        ["model", "built", "layers", "attention", "cache channels", "rotary", "θ"],
        [
            [
                r["model"],
                r["built"],
                str(r["layers"]),
                r["attention"],
                r["channels"],
                r["scheme"],
                _fmt(r["theta"], ".0e"),
            ]
            for r in rs
        ],
    ),
    "ttft": lambda rs: table(
        [
            "model",
            "n_B",
            "m",
            "prefill ms",
            "reuse ms",
            "apply ms",
            "prefill / reuse",
            "paper (H100)",
            "apply GB/s",
            "copy GB/s",
            "form ms",
            "break-even N",
        ],
        [
            [
                r["model"],
                str(r["n_b"]),
                str(r["rank"]),
                _fmt(r["prefill_ms"], ".2f"),
                _fmt(r["reuse_ms"], ".2f"),
                _fmt(r["apply_ms"], ".3f"),
                _fmt(r["speedup"], ".1f") + "×",
                _fmt(r["paper_speedup"], ".1f") + ("×" if r["paper_speedup"] else ""),
                _fmt(r["apply_bytes_per_s"] / 1e9, ".3g"),
                _fmt(r["copy_bytes_per_s"] / 1e9, ".3g"),
                _fmt(r["form_ms"], ".0f"),
                _fmt(r["break_even"], ".0f"),
            ]
            for r in rs
        ],
    ),
    "identities": lambda rs: _identity_table(rs, "model"),
    "kernels": lambda rs: _identity_table(rs, "kernel"),
    "relocation": lambda rs: table(
        ["model", "scheme", "θ", "δ", "rel err L0", "rel err max layer", "≤ 1 ULP L0", "max ULP L0 (vector)", "ok"],
        [
            [
                r["model"],
                r["scheme"],
                _fmt(r["theta"], ".0e"),
                str(r["distance"]),
                _fmt(r["rel_err_l0"], ".2e"),
                _fmt(r["rel_err_max_layer"], ".2e"),
                _fmt(r["ulp_le1_l0"], ".4f"),
                _fmt(r["vector_ulp_max_l0"], ".1f"),
                "yes" if r["ok"] else "NO",
            ]
            for r in rs
        ],
    ),
}


def _identity_table(rs: list[dict], first: str) -> str:
    rows = []
    for r in rs:
        if not r.get("ran", True):
            rows.append([r[first], "did not run: " + r["why"], *[""] * 7])
            continue
        rows.append(
            [
                r[first],
                _fmt(r["kl_blind"], ".2e"),
                _fmt(r["kl_full"], ".2e"),
                _fmt(r["kl_splice_floor"], ".2e"),
                _fmt(r["full_ulp_le1"], ".4f"),
                _fmt(r["full_vector_ulp_max"], ".1f"),
                "yes" if r["rank0_ok"] else "NO",
                "yes" if r["full_ok"] else "NO",
                f"≈{r['paper_kl_patch']:.0e}, ≪ blind",
            ]
        )
    return table(
        [
            first,
            "KL blind",
            "KL full rank",
            "KL splice floor",
            "full rank ≤ 1 ULP",
            "max ULP (vector)",
            "rank 0 = blind",
            "full rank = re-prefill",
            "paper KL (Fig. 12a)",
        ],
        rows,
    )


class Report:
    """Records per section, written to <out>/gpu_check.json and .md after every section, and the failures."""

    def __init__(self, out: Path, budget_s: float) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.json, self.md, self.log = out / "gpu_check.json", out / "gpu_check.md", out / "gpu_check.log"
        self.log.write_text("")
        self.t0, self.budget_s = time.monotonic(), budget_s
        self.sections: dict[str, list[dict]] = {}
        self.notes: list[str] = []
        self.failures: list[str] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, line: str) -> None:
        line = f"[{self.elapsed():5.0f} s] {line}"
        print(line, flush=True)
        with self.log.open("a") as f:
            f.write(line + "\n")

    def add(self, section: str, records: list[dict]) -> None:
        self.sections.setdefault(section, []).extend(records)
        for r in records:
            bad = [k for k in ("rank0_ok", "full_ok", "ok") if r.get(k) is False]
            if bad:
                self.failures.append(f"{section}: {', '.join(bad)} false for {json.dumps(r, default=str)}")
        self.write()
        self.say(f"{section}: {len(records)} record(s) → {self.json}, {self.md}")

    def attempt(self, section: str, fn: Callable[[], list[dict] | Iterator[list[dict]]]) -> list[dict] | None:
        """Run one section and add its records (a list, or batches as they come, each kept at once); a section that
        raises is a failure (traceback in the log), and the run goes on to the next. Returns the records, or None."""
        records: list[dict] = []
        try:
            result = fn()
            for batch in [result] if isinstance(result, list) else result:
                self.add(section, batch)
                records += batch
        except Exception as err:
            self.failures.append(f"{section}: {type(err).__name__}: {err}")
            self.say(f"{section} FAILED: {type(err).__name__}: {err}\n{traceback.format_exc()}")
            self.write()
            return None
        return records

    def note(self, line: str) -> None:
        self.notes.append(line)
        self.say(line)
        self.write()

    def write(self) -> None:
        doc = {"elapsed_s": self.elapsed(), "sections": self.sections, "notes": self.notes, "failures": self.failures}
        tmp = self.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        tmp.replace(self.json)
        parts = ["# gpu_check --paper", "", *(f"- {n}" for n in self.notes), ""]
        for name, rs in self.sections.items():
            key = "identities" if name.endswith("identities") else name.removeprefix("mla ")
            parts += [f"## {name}", "", TABLES[key](rs), ""]
        parts += [
            "## verdict",
            "",
            "every identity holds" if not self.failures else "BROKEN:\n" + "\n".join(f"- {f}" for f in self.failures),
            "",
        ]
        self.md.write_text("\n".join(parts))


# ----- the run -------------------------------------------------------------------------------------------------
def environment(device: str, plan: Plan) -> list[dict]:
    """Library versions, the device and its copy rate."""
    env = {
        "torch": torch.__version__,
        "transformers": tf.__version__,
        "python": platform.python_version(),
        "device": device,
        "plan": json.dumps(asdict(plan)),
    }
    if device.startswith("cuda"):
        env |= {
            "gpu": torch.cuda.get_device_name(),
            "cuda": torch.version.cuda,
            "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1),
        }
    env["copy_bytes_per_s"] = copy_rate(device, plan.copy_bytes, plan.repeats)
    return [env]


def on_model(
    report: Report,
    role: str,
    layers: int | None,
    steps: dict[str, Callable[[Adapter], list[dict] | Iterator[list[dict]]]],
    tiny: bool,
    device: str,
    may_not_fit: bool = False,
) -> None:
    """Build the role's model, run each step on it (a step that raises is a failure, the others still run), free it."""
    try:
        adapter = build(role, tiny, layers, device)
    except torch.OutOfMemoryError as err:
        if not may_not_fit:
            raise
        report.note(f"{MODELS[role][1 if tiny else 0]} did not fit: {str(err).splitlines()[0]}")
        return
    report.add(
        "models", [structure(adapter, f"{'tiny twin' if tiny else 'published config'}, random weights on {device}")]
    )
    try:
        for section, step in steps.items():
            if report.elapsed() > report.budget_s:
                report.note(
                    f"{section} on {adapter.name} skipped: the {report.budget_s:.0f} s budget is spent "
                    f"(rerun with --sections)"
                )
                continue
            report.attempt(section, lambda step=step: step(adapter))
    finally:
        adapter = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def run(args: argparse.Namespace) -> int:
    """``gpu_check.py --paper``: the sections in ``args.sections``; 1 when an identity breaks or a section fails."""
    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU (torch.cuda.is_available() is False)")
    if not device.startswith("cuda") and not args.tiny:
        raise SystemExit("--paper at full width needs a GPU (Qwen2.5-VL-7B in bf16 is 15 GB); on a CPU add --tiny")
    plan = TINY_PLAN if args.tiny else PAPER_PLAN
    report = Report(Path(args.out or os.environ.get("OUT") or "outputs/gpu_check"), args.budget_s)
    env = report.attempt("env", lambda: environment(device, plan))
    copy_bps = env[0]["copy_bytes_per_s"] if env else math.nan
    report.say(
        f"torch {torch.__version__}, transformers {tf.__version__}; "
        f"{'tiny twins' if args.tiny else 'published configs'}, sections {' '.join(args.sections)}"
    )
    wanted, gen = set(args.sections), torch.Generator().manual_seed(0)
    if args.tiny:
        report.attempt("models", published_structures)

    def identity_item(a: Adapter) -> list[dict]:
        return [identities(ReuseContext(a, item(plan.sizes[0], plan.context, gen)))]

    steps = {
        "ttft": lambda a: ttft(a, plan, copy_bps, report.say),
        "identities": identity_item,
        "kernels": lambda a: kernels(a, plan),
        "relocation": lambda a: relocation(a, plan),
    }
    if wanted & set(steps):
        on_model(report, "gqa", None, {k: v for k, v in steps.items() if k in wanted}, args.tiny, device)
    if "relocation" in wanted:
        for role in ("interleaved", "omni"):
            on_model(report, role, plan.layers, {"relocation": steps["relocation"]}, args.tiny, device)
    if "mla" in wanted:
        left = report.budget_s - report.elapsed()
        if left < plan.mla_reserve_s:
            report.note(
                f"mla skipped: {left:.0f} s of the {report.budget_s:.0f} s budget left, it needs about "
                f"{plan.mla_reserve_s:.0f} s (rerun with --sections mla)"
            )
        else:
            on_model(
                report,
                "mla",
                None,
                {f"mla {k}": steps[k] for k in ("ttft", "identities", "relocation")},
                args.tiny,
                device,
                may_not_fit=True,
            )
    print("\n" + report.md.read_text(), flush=True)
    report.say(f"results → {report.json}, {report.md}, {report.log}")
    if report.failures:
        report.say(f"{len(report.failures)} failure(s): see the verdict in {report.md}")
        return 1
    return 0
