"""Fig. 3(b): the relative Frobenius norm of the deficit per layer, raw vs conditioning vs position.

Per layer ℓ and channel c, each norm divided by ‖KV(B|A)_ℓ,c‖_F (the conditioned page, the
figure's "‖·‖_F / ‖KV‖"):

    raw           ‖KV(B|A) − KV(B|∅)‖          the canonical as stored, not relocated
    conditioning  ‖KV(B|A) − R(δ)·KV(B|∅)‖     = ‖Δ‖, what the patch carries
    position      ‖R(δ)·KV(B|∅) − KV(B|∅)‖     the position confound: raw − conditioning as
                                               matrices, what R(δ) alone removes

The paper's sentence is "the deficit grows with depth and is almost entirely conditioning, not
position". R(δ) turns only rotary channels, so on a content channel (the MLA latent the paper plots,
or V) raw = conditioning and position = 0 exactly under these definitions; there the position
effect that remains sits *inside* Δ (the canonical was prefilled with a different prefix ↔ B
distance). ``oracle=True`` splits Δ with the 4D-mask oracle (B at its native positions, B ↛ A;
one extra forward per item) so that effect is shown on every channel:

    conditioning_a     ‖KV(B|A) − KV_oracle(B)‖          what A itself adds (A-specific)
    position_residual  ‖KV_oracle(B) − R(δ)·KV(B|∅)‖      what the moved prefix distance adds
"""

from __future__ import annotations

from kamera.diagnostics.common import frobenius, relative, role
from kamera.reuse.context import ReuseContext


def deficit_norms(ctx: ReuseContext, oracle: bool = False) -> list[dict]:
    """Relative Frobenius norms per (layer, channel).

    Records: ``{layer, channel, role, quantity, value}``; quantity ``"raw"``, ``"conditioning"``,
    ``"position"`` and, with ``oracle``, ``"conditioning_a"`` and ``"position_residual"``; plus
    ``"kv_norm"`` (‖KV(B|A)‖_F itself, the denominator)."""
    cond, canon, moved = ctx.conditioned, ctx.canonical, ctx.relocated
    orc = ctx.oracle_b if oracle else None
    out = []
    for l in range(cond.n_layers):
        for c, spec in enumerate(cond.specs):
            k, s, r = (x.layers[l][c].double() for x in (cond, canon, moved))
            den = frobenius(k)
            parts = {"raw": k - s, "conditioning": k - r, "position": r - s}
            if orc is not None:
                o = orc.layers[l][c].double()
                parts |= {"conditioning_a": k - o, "position_residual": o - r}
            for q, x in parts.items():
                out.append({"layer": l, "channel": spec.name, "role": role(spec), "quantity": q,
                            "value": relative(frobenius(x), den)})
            out.append({"layer": l, "channel": spec.name, "role": role(spec), "quantity": "kv_norm", "value": den})
    return out
