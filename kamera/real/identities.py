"""The operator's identities on a checkpoint's own weights, each printed with its measured value and bound.

    python -m kamera.real.identities --path DIR [--items 4] [--chat none]     # exit 1 on any miss

On ``--items`` binding_words two-hop items (the binding task in words; any text tokenizer), loaded as
``model=hf model.path=DIR`` loads it (float32), per item:

- **own forward**: the harness's span-wise re-prefill logits = the model's own forward from the ids;
- **relocation** per layer type: B prefilled alone at 0 and moved by R(δ) (each layer with its own RoPE base) = B
  prefilled alone at δ, relative error ≤ 1e-5 + eps₃₂ · max |p| · L (float32 p·θ rounding, eps₃₂ · |p| per
  rotated element, which each of the L layers may pass on to the next one's keys);
- **full rank = re-prefill**: the full-rank patch's KV = KV(B|A) (relative 1e-5) and its next-token KL ≤ 1e-6 · KL_blind
  + 1e-10 (η ≥ 0.999 where blind loses something measurable);
- **rank 0 = blind**: bit for bit;
- **layer driver** (models it serves): every row of B recomputed at every layer in context = KV(B|A) (relative 1e-5),
  sliding layers masked to their window.

Beside them, not gated: KL_blind, and for a model with sliding layers the share of ‖Δ‖² on them and the η of the
full-rank patch at the sliding / global layers alone (:func:`kamera.diagnostics.windowed.windowed_deficit`).
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from kamera.core import ChunkKV, relocate
from kamera.data.registry import load_items
from kamera.diagnostics.windowed import windowed_deficit
from kamera.engine.check import Check
from kamera.metrics import eta, kl
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import reuse_bottom

EPS32 = torch.finfo(torch.float32).eps


def rel_err(a: ChunkKV, b: ChunkKV, channel: int, layers: list[int] | None = None) -> float:
    ls = range(len(a.layers)) if layers is None else layers
    return max(
        (
            float(
                (a.layers[l][channel].double() - b.layers[l][channel].double()).norm()
                / b.layers[l][channel].double().norm().clamp_min(1e-30)
            )
            for l in ls
        ),
        default=0.0,
    )


def alone(adapter, span, start: int) -> ChunkKV:
    enc = adapter.encode_span(span)
    out = adapter.forward([(enc, start)])
    return adapter.read(out.cache, 0, enc.n_tokens, enc.local_pos + start)


@torch.no_grad()
def item_checks(adapter, spans, delta: int = 97) -> tuple[list[Check], dict]:
    """The checks on one item's spans (module docstring), and the not-gated numbers."""
    ctx = ReuseContext(adapter, spans)
    checks: list[Check] = []
    ids = torch.cat([s.input_ids for s in ctx.enc.spans])[None]
    own = adapter.logits(adapter.lm(input_ids=ids.to(adapter.device)).last_hidden_state[0, -1])
    checks.append(
        Check(
            "own forward: max |logit diff|",
            float((ctx.reprefill_logits - own).abs().max()),
            1e-3,
            float((ctx.reprefill_logits - own).abs().max()) <= 1e-3,
        )
    )
    b = ctx.enc.spans[ctx.b].span
    base = alone(adapter, b, 0)
    moved, target = relocate(base, delta), alone(adapter, b, delta)
    bound = 1e-5 + EPS32 * (delta + base.n_tokens) * adapter.n_layers
    kinds = {}
    for l in range(adapter.n_layers):
        kinds.setdefault("sliding" if adapter.layer_window(l) is not None else "global", []).append(l)
    for kind, layers in sorted(kinds.items()):
        err = max(rel_err(moved, target, c, layers) for c in range(len(adapter.specs)))
        checks.append(Check(f"relocation R({delta}) = prefill at +{delta}, {kind}", err, bound, err <= bound))
    ref, kl_blind = ctx.reprefill_logits, kl(ctx.reprefill_logits, ctx.blind.logits)
    full = ctx.patch.apply(ctx.relocated)
    err = max(rel_err(full, ctx.conditioned, c) for c in range(len(adapter.specs)))
    checks.append(Check("full rank: KV = KV(B|A), relative", err, 1e-5, err <= 1e-5))
    kl_full = kl(ref, ctx.query(full).logits)
    bound = 1e-6 * kl_blind + 1e-10
    checks.append(Check("full rank: KL to re-prefill", kl_full, bound, kl_full <= bound))
    r0 = ctx.query(ctx.patch.truncate(0).apply(ctx.relocated)).logits
    diff = float((r0 - ctx.blind.logits).abs().max())
    checks.append(Check("rank 0 = blind: max |logit diff|", diff, 0.0, torch.equal(r0, ctx.blind.logits)))
    if adapter.refuses("layers") is None:
        err = max(rel_err(reuse_bottom(ctx, 0).kv, ctx.conditioned, c) for c in range(len(adapter.specs)))
        checks.append(Check("layer driver: all rows recomputed = KV(B|A)", err, 1e-5, err <= 1e-5))
    info = {"n_b": ctx.n_b, "kl_blind": kl_blind, "eta_full": eta(kl_full, kl_blind)}
    if "sliding" in kinds:
        info.update(windowed_deficit(ctx))
    return checks, info


def run(path: str, n_items: int = 4, chat: str = "none", out=None) -> bool:
    """Load ``path`` as ``model=hf`` does (float32), run :func:`item_checks` on ``n_items`` binding_words two-hop
    items, print every check and the not-gated numbers; True when every check holds."""
    from kamera.models import load_model

    out = out or sys.stdout  # read at call time, so a redirected stdout is the one written to
    adapter = load_model("hf", path=path, dtype="float32", chat=chat)
    items = load_items("binding_words", subset="two_hop", n_items=n_items, seed=0)
    ok, infos = True, []
    for item in items:
        checks, info = item_checks(adapter, item.spans())
        print(f"item {item.item_id} (n_B {info['n_b']}, KL_blind {info['kl_blind']:.3g})", file=out)
        for c in checks:
            print("  " + c.line(), file=out)
            ok &= c.ok
        infos.append(info)
    if infos and "energy_share_sliding" in infos[0]:

        def mean(k):
            vals = [i[k] for i in infos if not math.isnan(i[k])]
            return sum(vals) / len(vals) if vals else float("nan")

        print(
            f"sliding layers: {mean('layers_sliding'):.2f} of the layers carry {mean('energy_share_sliding'):.3f} "
            f"of ||Δ||² ({mean('in_window_share'):.3f} of theirs on rows the query's window reads); full-rank patch "
            f"on sliding layers only η {mean('eta_sliding_only'):.3f}, on global layers only η "
            f"{mean('eta_global_only'):.3f} (not gated; means over {len(infos)} items)",
            file=out,
        )
    print(f"identities: {'all hold' if ok else 'BROKEN'}", file=out)
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kamera.real.identities", description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="a checkpoint directory (or .gguf) model=hf serves")
    p.add_argument("--items", type=int, default=4)
    p.add_argument("--chat", choices=("none", "template"), default="none")
    args = p.parse_args(argv)
    return 0 if run(args.path, args.items, args.chat) else 1


if __name__ == "__main__":
    sys.exit(main())
