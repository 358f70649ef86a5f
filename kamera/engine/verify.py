"""A correctness gate for the engine path: kamera's identities, measured through vLLM's KV connector on one checkpoint.

    python -m kamera.engine.verify --model DIR [--dtype float32|bfloat16]   # exits 1 on any miss
    python -m kamera.engine.verify --family qwen2_5_vl                      # a tiny twin (kamera.engine.checkpoint)
    python -m kamera.engine.verify --engine sglang --family qwen2           # the same checks through stock SGLang

``--engine sglang`` runs them through SGLang's server with kamera's radix cache (:mod:`kamera.engine.sglang_server`,
``make sglang-venv``): text families only, and "vLLM" below reads "SGLang".

One synthetic item [prefix · A · B · query] (random token ids; for an M-RoPE model an image in A and one at the
head of B) is prefilled by vLLM and captured (the re-prefill: its log-probs, KV(B|A), the exact prefix · A KV), and
[prefix · B] is captured (the canonical KV(B|∅)); the patch is formed from the two with kamera's operator. Then,
each as one request that claims [prefix · A · B] through the connector and computes only the query:

- **round trip**: the engine's own KV re-injected is bit-identical in the cache, and so are the log-probs
  (vLLM's GQA; MLA's prefill merges its two attention passes differently, and SGLang's extend attention over a
  cached prefix differs from its own prefill as much, so there: to the dtype's rounding);
- **relocation**: what the operator promises. In float32, B's canonical KV moved by R(δ) through the connector
  equals vLLM's own prefill at the new position at layer 0 (which isolates relocation) to float32 rounding. In
  bfloat16, every element B's relocated KV is written with (every layer, as the cache holds it) is within one bf16
  ULP of the exact float64 rotation R(δ) of the stored bf16 canonical page, the ULP taken at the larger magnitude
  of the element's rotary pair (:func:`pair_ulps`: R(δ) mixes a pair, so one rounding of the larger element moves
  the smaller by as much; content channels, which R(δ) does not touch, at their own magnitude). The distance to
  vLLM's own bf16 prefill at the new position is printed beside it, informational: the canonical page is vLLM's
  bf16 cache (R(p)k rounded once) and the relocated key is rounded again, while vLLM's prefill rounds once, so the
  two differ by up to a few ULPs of the pair by double rounding, not by a fault of R(δ);
- **full rank = re-prefill**: the full-rank patch gives vLLM's re-prefill KV (relative error 1e-5; bf16: 2 ε) and
  next-token KL < 1e-9 (bf16: a tenth of blind's);
- **rank 0 = blind**: bit for bit;
- **each splice is its own KV**: blind's B, past layer 0, is not the re-prefill's (an engine that shares one request's
  cached KV with the next, the same tokens spliced another way, serves it the other's and passes every check above);
- **fallback = no reuse**: a rank-8 splice whose canonical page or patch is missing, corrupt, truncated or of
  other weights (:mod:`kamera.engine.fallback`) gives the greedy token and log-probs of the same prompt sent
  without kamera parameters, byte for byte, and names the cause (:func:`fallback_checks`).

Every check prints its measured value beside its bound; any miss makes the exit status 1. The paper's binding
claim itself (the patch restores multi-hop answers blind reuse loses) is not measured here: the tiny and random
checkpoints have no binding to lose (the toy task's checkpoint is not a vLLM model).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from kamera.core import ChunkKV, Patch, deficit, relocate
from kamera.engine.check import Check
from kamera.engine.fallback import CAUSES, broken_copy, cases, identical
from kamera.engine.family import DTYPES, EngineError, attention, mrope
from kamera.engine.plan import PARAMS
from kamera.engine.store import save_patch
from kamera.metrics import kl

FP32_ROUNDING = 32 * torch.finfo(torch.float32).eps  # vLLM's cos / sin tables hold position × θ in float32
BF16_EPS = torch.finfo(torch.bfloat16).eps


def pair_scale(ref: torch.Tensor, rotary) -> torch.Tensor:
    """|ref| per element, except that each rotary pair's two elements take the larger of the pair's two magnitudes:
    R(δ) mixes a pair, so a rounding of one element moves the other by up to the same amount, and the spacing
    of the pair's larger element is the bf16 floor of both. ``ref`` [..., dim]; ``rotary`` None for a content
    channel ("half": pairs (i, i + r/2); "interleaved": (2i, 2i + 1), over the first ``rotary_dim`` dims)."""
    scale = ref.double().abs()
    if rotary is None:
        return scale
    r = rotary.rotary_dim
    rot = scale[..., :r]
    if rotary.layout == "half":
        m = torch.maximum(rot[..., : r // 2], rot[..., r // 2:])
        rot = torch.cat([m, m], dim=-1)
    else:
        m = torch.maximum(rot[..., 0::2], rot[..., 1::2])
        rot = m.repeat_interleave(2, dim=-1)
    return torch.cat([rot, scale[..., r:]], dim=-1)


def pair_ulps(got: torch.Tensor, ref: torch.Tensor, rotary) -> torch.Tensor:
    """|got − ref| in bf16 ULPs at :func:`pair_scale` (zero where both are zero)."""
    unit = torch.exp2(torch.floor(torch.log2(pair_scale(ref, rotary).clamp_min(torch.finfo(torch.bfloat16).tiny))) - 7)
    return (got.double() - ref.double()).abs() / unit


def max_pair_ulps(got: ChunkKV, ref: ChunkKV, specs, layers: range | None = None) -> float:
    """The largest :func:`pair_ulps` of ``got`` against ``ref`` over ``layers`` (all by default) and every channel."""
    return max(float(pair_ulps(x, y, spec.rotary).max())
               for l in (layers or range(got.n_layers))
               for x, y, spec in zip(got.layers[l], ref.layers[l], specs, strict=True))


def image(seed: int, size: tuple[int, int]):
    """A PIL image of random pixels, ``size`` = (height, width), from ``seed``."""
    from PIL import Image

    return Image.fromarray((np.random.RandomState(seed).rand(*size, 3) * 255).astype("uint8"))


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|."""
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


class Spliced:
    """The item, its captures and patch on one live session, and the splices the checks read."""

    def __init__(self, session, seed: int = 0) -> None:
        self.s = session
        g = torch.Generator().manual_seed(seed)
        text = lambda n: torch.randint(16, 400, (n,), generator=g).tolist()  # noqa: E731
        if mrope(session.config):
            cfg = session.config
            img = [int(cfg.vision_start_token_id), int(cfg.image_token_id), int(cfg.vision_end_token_id)]
            a_img, b_img = image(seed + 1, (100, 90)), image(seed + 2, (60, 120))
            parts = {"prefix": (text(5), []), "A": (text(9) + img + text(11), [a_img]),
                     "B": (img + text(23), [b_img]), "query": (text(6), [])}
            self.images, self.b_images = [a_img, b_img], [b_img]
        else:
            parts = {"prefix": (text(5), []), "A": (text(40), []), "B": (text(50), []), "query": (text(7), [])}
            self.images, self.b_images = [], []
        self.item = {role: session.expand(ids, ims) for role, (ids, ims) in parts.items()}
        p, a, b = (len(self.item[r]) for r in ("prefix", "A", "B"))
        self.p, self.pa, self.pb = p, p + a, p + a + b
        self.prompt = self.item["prefix"] + self.item["A"] + self.item["B"] + self.item["query"]
        self.ref = self.run({"capture": "full"})
        session.run(self.item["prefix"] + self.item["B"], {"capture": "canon"}, images=self.b_images)
        full, canon = session.page("full")[0], session.page("canon")[0]
        self.full, self.canon = full, canon
        self.delta = int(full.positions[..., self.pa].reshape(-1)[0] - canon.positions[..., p].reshape(-1)[0])
        b_canon = relocate(canon.slice(p, p + self.pb - self.pa), self.delta)
        save_patch(session.store, "patch", Patch.form(deficit(full.slice(self.pa, self.pb), b_canon), dtype=full.dtype),
                   session.model)

    def run(self, kamera: dict | None, fallback_ok: bool = False):
        return self.s.run(self.prompt, kamera, images=self.images, fallback_ok=fallback_ok)

    def exact_relocated(self) -> ChunkKV:
        """B's stored canonical page (as the cache holds it) turned by R(δ) in float64: the relocation the operator
        promises, before the one rounding into the cache's dtype."""
        page = self.canon.slice(self.p, self.p + self.pb - self.pa)
        exact = ChunkKV(page.specs, [tuple(t.double() for t in layer) for layer in page.layers], page.positions)
        return relocate(exact, self.delta)

    def segments(self, **b) -> list[dict]:
        """prefix · A exact from the full page, B from the canonical page placed at its start (``b``: B's options)."""
        seg = {"key": "canon", "span": [self.p, self.p + self.pb - self.pa], "start": self.pa, **b}
        return [{"key": "full", "span": [0, self.pa]}, seg]

    def splice(self, capture: str, **b) -> tuple:
        """One arm (:meth:`segments`), captured back: its output and B's KV as the cache holds it."""
        out = self.run({"capture": capture, "segments": self.segments(**b)})
        return out, self.s.page(capture)[0].slice(self.pa, self.pb)


def fallback_checks(pr: Spliced, rank: int = 8) -> list[Check]:
    """Each forced load failure (:func:`kamera.engine.fallback.cases`) on a rank-``rank`` splice: served as the same
    prompt with no kamera parameters, byte for byte (greedy token and every log-prob), with its cause named."""
    plain = pr.run(None)
    out = []
    for entry, failure in cases():
        good = "canon" if entry == "page" else "patch"
        broken = broken_copy(pr.s.store, good, failure, f"{entry}-{failure.replace(' ', '_')}")
        b = {"patch": "patch", "rank": rank} | ({"key": broken} if entry == "page" else {"patch": broken})
        got = pr.run({"segments": pr.segments(**b)}, fallback_ok=True)
        named = got.fallback is not None and re.search(CAUSES[failure], got.fallback) is not None
        same = identical(got, plain)
        diff = 0.0 if same else float((got.logprobs - plain.logprobs).abs().nan_to_num(float("inf")).max())
        out.append(Check(f"fallback, {failure} {entry} = no reuse (bit for bit)", diff, "identical, cause named",
                         same and named))
    return out


def checks(session) -> list[Check]:
    """Every identity of the module docstring on ``session``'s checkpoint and dtype."""
    pr = Spliced(session)
    fp32 = session.dtype == "float32"
    out: list[Check] = []
    again = pr.run({"capture": "again", "segments": [{"key": "full", "span": [0, pr.pb]}]})
    page = session.page("again")[0].slice(0, pr.pb)
    diff = max(rel(x, y) for a, b in zip(page.layers, pr.full.slice(0, pr.pb).layers, strict=True)
               for x, y in zip(a, b, strict=True))
    out.append(Check("round trip: cache KV (rel. error)", diff, "== 0", diff == 0))
    lp = float((again.logprobs - pr.ref.logprobs).abs().max())
    exact = attention(session.config) == "GQA" and session.extend_bitwise
    rounding = FP32_ROUNDING if fp32 else BF16_EPS  # MLA, SGLang: the prefill's one pass against the extend's
    out.append(Check("round trip: log-probs (max |diff|)", lp, "== 0" if exact else f"< {rounding:.1e}",
                     lp == 0 if exact else lp < rounding))
    blind, b_blind = pr.splice("blind")
    ref_b = pr.full.slice(pr.pa, pr.pb)
    if ref_b.n_layers > 1:  # past layer 0 KV(B|∅) is not KV(B|A): blind served the re-prefill's KV is shared KV
        own = max(rel(x, y) for a, b in zip(b_blind.layers[1:], ref_b.layers[1:], strict=True)
                  for x, y in zip(a, b, strict=True))
        out.append(Check("blind is served its own KV (rel. distance to re-prefill's, layers ≥ 1)", own, "> 0", own > 0))
    if fp32:
        r = max(rel(x, y) for x, y in zip(b_blind.layers[0], ref_b.layers[0], strict=True))
        out.append(Check("relocation at layer 0 (rel. error)", r, f"< {FP32_ROUNDING:.1e}", r < FP32_ROUNDING))
    else:
        u = max_pair_ulps(b_blind, pr.exact_relocated(), session.specs)
        out.append(Check("relocation = exact R(δ) of the stored page (max bf16 ULPs of the pair)", u, "<= 1", u <= 1))
        u = max_pair_ulps(b_blind, ref_b, session.specs, layers=range(1))
        out.append(Check("relocation vs the engine's bf16 prefill, layer 0 (reported)", u, "— (double rounding)", True))
    full, b_full = pr.splice("full_rank", patch="patch", rank=None)
    r = max(rel(x, y) for a, b in zip(b_full.layers, ref_b.layers, strict=True) for x, y in zip(a, b, strict=True))
    kv_bound = 1e-5 if fp32 else 2 * BF16_EPS
    out.append(Check("full rank = re-prefill: KV (rel. error)", r, f"< {kv_bound:.1e}", r < kv_bound))
    ref = pr.ref.logprobs.float()
    k_full, k_blind = kl(ref, full.logprobs.float()), kl(ref, blind.logprobs.float())
    bound = 1e-9 if fp32 else k_blind / 10
    out.append(Check("full rank = re-prefill: next-token KL", k_full, f"< {bound:.1e}", k_full < bound))
    zero, b_zero = pr.splice("rank0", patch="patch", rank=0)
    same = torch.equal(zero.logprobs, blind.logprobs) and all(
        torch.equal(x, y) for a, b in zip(b_zero.layers, b_blind.layers, strict=True) for x, y in zip(a, b, strict=True)
    )
    out.append(Check("rank 0 = blind (bit for bit)", 0.0 if same else 1.0, "identical", same))
    out.append(Check("blind reuse: next-token KL (reported)", k_blind, "—", True))
    return out + fallback_checks(pr)


def open_session(engine: str, model: str | Path, store: Path, dtype: str):
    """A live session of ``engine`` on ``model``: vLLM's EngineSession or an SGLang server."""
    if engine == "sglang":
        from kamera.engine.sglang_server import SGLangSession

        return SGLangSession(model, store, dtype=dtype, max_model_len=512)
    from kamera.engine.vllm import EngineSession

    return EngineSession(model, store, dtype=dtype, max_model_len=512)


def main(argv: list[str] | None = None) -> int:
    """Run the checks and print them; 0 when every one holds, 1 otherwise (2 for bad arguments)."""
    from kamera.engine.checkpoint import CHECKPOINTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", type=Path, help="a checkpoint directory vLLM loads")
    which.add_argument("--family", choices=sorted(CHECKPOINTS), help="a tiny twin, written under --store")
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    ap.add_argument("--engine", choices=("vllm", "sglang"), default="vllm",
                    help="vLLM with kamera's KV connector, or SGLang with kamera's radix cache")
    ap.add_argument("--store", type=Path, default=None, help="the page store (default: a temporary folder)")
    args = ap.parse_args(argv)
    if args.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        ap.exit(2, "verify: vLLM is not installed in this env: run it in the engine venv (make engine-venv)\n")
    with tempfile.TemporaryDirectory(prefix="kamera-verify-") as tmp:
        store = args.store or Path(tmp)
        model = args.model or CHECKPOINTS[args.family](store / "checkpoints", dtype=args.dtype)
        if not (Path(model) / "config.json").is_file():
            ap.exit(2, f"verify: --model {model}: not a checkpoint directory (no config.json)\n")
        from transformers import AutoConfig

        from kamera.engine.family import preflight

        try:
            preflight(AutoConfig.from_pretrained(model))
            session = open_session(args.engine, model, store / "pages", args.dtype)
        except (EngineError, OSError, ValueError) as err:
            ap.exit(2, f"verify: {model}: {str(err).splitlines()[0]}\n")
        try:
            found = checks(session)
        finally:
            session.close()
    print(f"kamera engine verify: {model} ({args.dtype}, {args.engine} with the {PARAMS} "
          f"{'connector' if args.engine == 'vllm' else 'radix cache'})")
    for c in found:
        print(c.line())
    failed = [c.name for c in found if not c.ok]
    print(f"{len(found) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
