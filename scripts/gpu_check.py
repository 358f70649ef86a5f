"""Device check: the operator's exactness on an accelerator, per tiny family, in one short run.

``--paper`` instead measures the paper's GPU claims on paper-width models in one run under 8 minutes on an H200
(scripts/gpu_paper.py: Fig. 11(b)'s TTFT, the bf16 identities and relocation per M-RoPE layout, the attention
kernels), writing gpu_check.json / .md / .log to ``--out`` (default ``$OUT``); on the lent GPU it runs through
``scripts/device_run.sh``, which installs the bundle first (docs/gpu.md). ``--tiny`` is its CPU rehearsal::

    bash scripts/device_run.sh --paper --out "$OUT"                           # the lent GPU (docs/gpu.md)
    python scripts/gpu_check.py --paper --tiny --device cpu --out /tmp/gpu    # every section on the tiny twins

For each tiny family and dtype it prints relocation error (layer-0 keys, in units of the dtype's
ulp at each token-head's scale, and relative Frobenius over all layers), the full-rank patch
identity (KL / KL_blind) and blind KL; then the attention kernels that load. Everything here also
runs on CPU (``--device cpu``), which is how it is tested; on a GPU run it before trusting bf16 or
flash-attention numbers, then ``scripts/bench_reuse.py --device cuda --dtype bf16`` for timing.

    python scripts/gpu_check.py --device cuda

``--remote-equivalence MODEL`` (kimi_vl_a3b, phi3_5_vision, internvl_chat_v1_1) instead proves a remote-code
checkpoint's native mapping: it runs one image + text input through the native adapter and through the
checkpoint's own remote code (``trust_remote_code``), and prints max |Δlogits| and the next-token KL.
Where the remote code is absent (a shaped checkpoint) or does not run on this transformers, the
reference is ``scripts/remote_reference.py``, an independent forward written from the public
implementations' semantics; the line says which reference was used. Exit status 1 on a mismatch.

    python scripts/gpu_check.py --remote-equivalence kimi_vl_a3b --device cuda   # $KAMERA_MODELS/Kimi-VL-A3B-Instruct
    python scripts/gpu_check.py --remote-equivalence phi3_5_vision --path DIR --device cpu --dtypes float32

``--engine`` instead checks the live-engine path (docs/engine.md; run it in the engine venv, on a GPU node after
``scripts/install_engine.sh gpu``): one random-token item through vLLM with the kamera KV connector per dtype,
printing the next-token KL to vLLM's re-prefill per arm, the fraction of B's K / V (MLA: latent / k_pe) within
one bf16 ULP of vLLM's prefill at rank 256, the time to first token with and without the splice and the
connector's write time per token. Exit status 1 unless rank 256 (full rank on the tiny checkpoints) is 100×
below blind.

    python scripts/gpu_check.py --engine [--path DIR]   # default: kamera.engine.checkpoint's tiny Qwen2 and DeepSeek-V2

``--sglang`` runs kamera.engine.verify's checks through a stock SGLang server with kamera's radix cache on this
machine's GPU (SGLang installed beside kamera: ``pip install -e ".[sglang]"``), on the tiny Qwen2 (GQA) and the tiny
DeepSeek-V2 (MLA, which SGLang's CPU build cannot start: docs/engine.md, "SGLang"), one line per check; exit status 1
on any miss.

    python scripts/gpu_check.py --sglang [--path DIR] [--dtypes bfloat16]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gpu_paper
import numpy as np
import remote_reference
import torch
from PIL import Image

from kamera.core import relocate
from kamera.items.spans import Span
from kamera.metrics import kl
from kamera.models import checkpoint_path, load_model, model_names, place
from kamera.reuse.context import ReuseContext


def image(seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (112, 112, 3), dtype=np.uint8))


def spans(text_only: bool) -> list[Span]:
    def chunk(role: str, k: int) -> Span:
        return Span(role, (f"object {k} has colour {k}.",) if text_only else (image(k), f"caption {k}"))

    return [
        Span("prefix", ("Answer with a letter.",)),
        chunk("A", 0),
        chunk("A", 1),
        chunk("B", 2),
        Span("query", ("Which colour? Answer:",)),
    ]


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
        worst_rel = max(
            worst_rel,
            *(
                float((m[k].float() - t[k].float()).norm() / t[k].float().norm())
                for m, t in zip(moved.layers, target.layers, strict=True)
            ),
        )
    ctx = ReuseContext(adapter, spans(text_only))
    kl_blind = kl(ctx.reprefill_logits, ctx.blind.logits)
    kl_full = kl(ctx.reprefill_logits, ctx.query(ctx.patch.apply(ctx.relocated)).logits)
    return (
        f"{name:18s} {dtype:9s} {attn:18s} reloc L0 {worst_ulp:5.1f} ulp  all-layers rel {worst_rel:.1e}  "
        f"KL_blind {kl_blind:.2e}  full-rank KL/KL_blind {kl_full / max(kl_blind, 1e-30):.1e}"
    )


# ----- remote-code checkpoints: the native mapping against the model's own code -------------------------
REFERENCES = {
    "kimi_vl_a3b": remote_reference.kimi_vl_logits,
    "phi3_5_vision": remote_reference.phi3_v_logits,
    "internvl_chat_v1_1": remote_reference.internvl_chat_logits,
}
# fp32 forwards of the same weights differ only in summation order; bf16 kernels differ in rounding too
TOLERANCE = {"float32": (1e-4, 1e-6), "bfloat16": (5e-2, 1e-2)}  # (max|Δ| / max|logit|, KL)


@dataclass
class Equivalence:
    """One remote-equivalence run: which reference, how far the native logits are from it."""

    model: str
    dtype: str
    reference: str
    n_tokens: int
    max_abs: float
    max_logit: float
    kl: float
    top1_agree: bool

    @property
    def ok(self) -> bool:
        rel, kl_max = TOLERANCE[self.dtype]
        return self.top1_agree and self.max_abs <= rel * self.max_logit and self.kl <= kl_max

    def line(self) -> str:
        return (
            f"{self.model} {self.dtype} vs {self.reference}: {self.n_tokens} tokens, max|Δlogits| {self.max_abs:.3e} "
            f"(max|logit| {self.max_logit:.2f}), next-token KL {self.kl:.3e}, top-1 "
            f"{'agrees' if self.top1_agree else 'DIFFERS'} -> {'OK' if self.ok else 'MISMATCH'}"
        )


def equivalence_input(
    adapter, size: tuple[int, int]
) -> tuple[list[int], list[tuple[torch.Tensor, tuple[int, int]]], list]:
    """One image + text in the model's chat layout: token ids, the image's pixels and grid / HD size, the spans."""
    item = [
        Span("A", ("Look at the picture.",)),
        Span("B", (image(7).resize(size), "What is in this image?")),
        Span("query", ("Answer in one word:",)),
    ]
    enc = adapter.encode(item)
    ids = torch.cat([s.input_ids for s in enc.spans]).tolist()
    px = adapter._pixels(item[1].parts[0].convert("RGB"))
    grid = (
        px["image_grid_thw"][0, 1:]
        if "image_grid_thw" in px
        else px.get("image_sizes", torch.tensor(px["pixel_values"].shape[-2:]))
    )
    return ids, [(px["pixel_values"], tuple(int(g) for g in grid.tolist()))], enc


def remote_logits(name: str, path: Path, ids: list[int], images, dtype: torch.dtype, device: str) -> torch.Tensor:
    """The checkpoint's own remote code on the same ids and pixels (raises if it cannot load or run)."""
    import transformers as tf

    auto = tf.AutoModel if name == "internvl_chat_v1_1" else tf.AutoModelForCausalLM
    model = (
        auto.from_pretrained(path, trust_remote_code=True, dtype=dtype, attn_implementation="eager").to(device).eval()
    )
    ((pixels, grid),) = images
    if name == "internvl_chat_v1_1":  # its forward wants image_flags: embed, put extract_feature's rows, run the LLM
        tok = tf.AutoTokenizer.from_pretrained(path, trust_remote_code=True)
        input_ids = torch.tensor([ids], device=device)
        with torch.no_grad():
            embeds = model.language_model.get_input_embeddings()(input_ids)
            slots = input_ids[0] == tok.convert_tokens_to_ids("<IMG_CONTEXT>")
            embeds[0, slots] = model.extract_feature(pixels.to(device, dtype)).reshape(-1, embeds.shape[-1])
            return model.language_model(inputs_embeds=embeds).logits[0, -1].float().cpu()
    if name == "kimi_vl_a3b":  # media_pad ids mark the features; grid as (h, w) per image
        kwargs = dict(pixel_values=pixels.to(device, dtype), image_grid_hws=torch.tensor([grid], device=device))
        input_ids = torch.tensor([ids], device=device)
    else:  # Phi3V marks image rows with negative ids and takes crops padded to num_crops + 1
        crops = int(json.loads((path / "preprocessor_config.json").read_text())["num_crops"]) + 1
        pad = torch.zeros(crops - pixels.shape[0], *pixels.shape[1:])
        kwargs = dict(
            pixel_values=torch.cat([pixels.float(), pad])[None].to(device, dtype),
            image_sizes=torch.tensor([grid], device=device),
        )
        input_ids = torch.tensor([[-1 if t == 32044 else t for t in ids]], device=device)
    with torch.no_grad():
        return model(input_ids=input_ids, **kwargs).logits[0, -1].float().cpu()


def remote_equivalence(
    name: str,
    path: str | Path | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    size: tuple[int, int] = (448, 336),
    num_crops: int | None = None,
) -> Equivalence:
    """Native mapping vs the remote code (or the public-semantics reference) on one image + text input."""
    if name not in REFERENCES:
        raise ValueError(f"--remote-equivalence takes one of {sorted(REFERENCES)}, got {name!r}")
    path = checkpoint_path(name, path)
    adapter = load_model(name, dtype=dtype, device=device, path=path)
    if num_crops is not None:
        adapter.image_processor = dataclasses.replace(adapter.image_processor, num_crops=num_crops)
    ids, images, enc = equivalence_input(adapter, size)
    ours = adapter.forward(place(enc.spans)).logits.double().cpu()
    reference = "public-semantics reference (scripts/remote_reference.py)"
    theirs = None
    if list(path.glob("modeling_*.py")):
        try:
            theirs = remote_logits(name, path, ids, images, adapter.dtype, device).double()
            reference = "the checkpoint's remote code"
        except Exception as err:  # remote code written for older transformers: say so, fall back
            print(f"remote code did not run ({type(err).__name__}: {err}); using the public-semantics reference")
    if theirs is None:
        del adapter
        theirs = REFERENCES[name](path, ids, [(p.float().cpu(), g) for p, g in images])
    return Equivalence(
        name,
        dtype,
        reference,
        len(ids),
        float((ours - theirs).abs().max()),
        float(theirs.abs().max()),
        kl(theirs.float(), ours.float()),
        int(ours.argmax()) == int(theirs.argmax()),
    )


# the engine check's arms: how B is served (kamera.engine.measure.engine_item)
ARMS = {
    "reprefill": None,
    "unrotated": {"rotate": False},
    "blind": {},
    "patch_r8": {"rank": 8},
    "patch_r64": {"rank": 64},
    "patch_r256": {"rank": 256},
}


def engine_check(dtypes: list[str], path: str | None = None) -> bool:
    """The engine path on this machine's accelerator (or CPU): one line per dtype; False on a mismatch."""
    import tempfile

    from kamera.engine.checkpoint import CHECKPOINTS
    from kamera.engine.measure import engine_item, items
    from kamera.engine.vllm import EngineSession

    ok = True
    item = items(1)[0]
    with tempfile.TemporaryDirectory() as tmp:
        models = {Path(path).name: Path(path)} if path else {f"tiny_{f}": make(tmp) for f, make in CHECKPOINTS.items()}
        for (name, model), dtype in ((m, d) for m in models.items() for d in dtypes):
            session = EngineSession(model, Path(tmp) / "store" / name / dtype, dtype=dtype, max_model_len=1024)
            try:
                session.run(item["prefix"] + item["A"])  # warm-up
                kv, t = engine_item(session, item, ARMS)
            finally:
                session.close()
            kl_of = {arm: m["kl"] for arm, m in kv.items()}
            good = kl_of["patch_r256"] < kl_of["blind"] / 100
            ok &= good
            arms = " ".join(
                f"{a} {kl_of[a]:.2e}" for a in ("unrotated", "blind", "patch_r8", "patch_r64", "patch_r256")
            )
            le1 = kv["patch_r256"]["ulp_le1"]
            print(
                f"engine {name} {dtype:9s} KL {arms} | r256 within 1 bf16 ULP {le1:.4f} | TTFT prefill "
                f"{1e3 * t['ttft_prefill_s']:.2f} ms, splice {1e3 * t['ttft_splice_s']:.2f} ms, write "
                f"{1e6 * t['write_s'] / t['claimed_tokens']:.3f} µs/token | {'ok' if good else 'MISMATCH'}",
                flush=True,
            )
    return ok


def sglang_check(dtypes: list[str], path: str | None = None, device: str = "cuda") -> bool:
    """kamera.engine.verify's checks through SGLang on ``device`` (the SGLang of ``$SGLANG_PYTHON``, else of this
    interpreter): False on any miss. A model SGLang cannot serve there is named, and counts as a miss."""
    import os
    import tempfile

    from transformers import AutoConfig

    from kamera.engine.checkpoint import CHECKPOINTS
    from kamera.engine.sglang_server import SGLangSession, cpu_refusal
    from kamera.engine.verify import checks

    ok = True
    python = os.environ.get("SGLANG_PYTHON") or sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        models = {Path(path).name: Path(path)} if path else {
            f"tiny_{f}": CHECKPOINTS[f](tmp) for f in ("qwen2", "deepseek_v2")}
        for (name, model), dtype in ((m, d) for m in models.items() for d in dtypes):
            refused = cpu_refusal(AutoConfig.from_pretrained(model)) if device == "cpu" else None
            if refused:
                print(f"sglang {name} {dtype:9s} REFUSED on the CPU: {refused}", flush=True)
                ok = False
                continue
            session = SGLangSession(model, Path(tmp) / "store" / name / dtype, dtype=dtype, max_model_len=512,
                                    python=python, device="cpu" if device == "cpu" else "cuda")
            try:
                found = checks(session)
            finally:
                session.close()
            for c in found:
                print(f"sglang {name} {dtype:9s} {c.line()}", flush=True)
            ok &= all(c.ok for c in found)
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--models", nargs="+", default=model_names("tiny"))
    ap.add_argument("--remote-equivalence", metavar="MODEL", help="check a remote-code checkpoint's native mapping")
    ap.add_argument("--path", help="checkpoint directory (default $KAMERA_MODELS/<repo name>)")
    ap.add_argument("--image-size", nargs=2, type=int, default=(448, 336), metavar=("W", "H"))
    ap.add_argument("--num-crops", type=int, help="Phi-3.5-V HD crops (default: the checkpoint's preprocessor)")
    ap.add_argument("--engine", action="store_true", help="check vLLM with the kamera KV connector (the engine venv)")
    ap.add_argument("--sglang", action="store_true", help="the engine checks through SGLang with kamera's radix cache")
    ap.add_argument("--paper", action="store_true", help="the paper's GPU claims on paper-width models (docs/gpu.md)")
    ap.add_argument("--tiny", action="store_true", help="--paper on the tiny twins at short lengths (CPU rehearsal)")
    ap.add_argument(
        "--out", help="--paper: folder for gpu_check.json / .md / .log (default $OUT, else outputs/gpu_check)"
    )
    ap.add_argument(
        "--sections",
        nargs="+",
        choices=gpu_paper.SECTIONS,
        default=list(gpu_paper.SECTIONS),
        help="--paper: the sections to run",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="--paper: seconds the run may take; the MLA section is skipped when too little is left",
    )
    args = ap.parse_args()
    if args.tiny and not args.paper:
        ap.error("--tiny goes with --paper")
    if args.budget_s <= 0:
        ap.error(f"--budget-s must be positive, got {args.budget_s}")
    if args.paper:
        sys.exit(gpu_paper.run(args))
    if args.engine:
        sys.exit(0 if engine_check(args.dtypes, args.path) else 1)
    if args.sglang:
        sys.exit(0 if sglang_check(args.dtypes, args.path, args.device) else 1)
    print(
        f"torch {torch.__version__}, device {args.device}"
        + (f" ({torch.cuda.get_device_name()})" if args.device.startswith("cuda") else "")
    )
    if args.remote_equivalence:
        failed = False
        for dtype in args.dtypes:
            result = remote_equivalence(
                args.remote_equivalence, args.path, args.device, dtype, tuple(args.image_size), args.num_crops
            )
            print(result.line(), flush=True)
            failed |= not result.ok
        sys.exit(1 if failed else 0)
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
