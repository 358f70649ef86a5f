"""Fig. 3(c): per layer, how many of A's keys hold 90% of the attention B pays A.

"The link from antecedent to chunk is itself low-rank (about 25 landmark keys carry 90%)". Choices:
- The attention is B's, in context: B's rows rerun layer by layer on the full prefill's cache
  (``[prefix · A · B]`` as the conditioned forward left it) from B's input embeddings, with eager
  attention (:func:`kamera.reuse.recompute.attention_to`, tag ``probe_landmarks``), so the probabilities
  are those of the conditioned forward itself.
- A key's "cross-block energy" at layer ℓ is the attention probability B's queries put on it,
  averaged over B's rows and all query heads (probabilities are already a distribution, so mass,
  not its square, is the energy). The landmark count is the smallest number of A's keys, taken in
  decreasing mass, whose mass reaches ``fraction`` (0.9) of the mass on all of A.
"""

from __future__ import annotations

import torch

from kamera.arms.cross_mass import a_columns
from kamera.knobs import check_share
from kamera.metrics import energy_rank
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import LayerDriver, attention_to


def a_key_mass(ctx: ReuseContext) -> list[torch.Tensor]:
    """Per layer, [n_A] float32: B's attention on each A key in the conditioned forward (head- and row-mean)."""
    a0, a1 = a_columns(ctx)
    if a1 <= a0:
        raise ValueError("landmark keys need an A span before B; this item has none")
    spans = ctx.enc.spans[: ctx.b + 1]
    driver = LayerDriver(ctx.adapter, spans, [*ctx.context_kv, ctx.conditioned], "probe_landmarks")
    b0, b1 = ctx.ranges[ctx.b]
    rows = torch.arange(b0, b1, device=ctx.adapter.device)
    return attention_to(driver, rows, ctx.enc.spans[ctx.b].embeds, carry=True,
                        reduce=lambda p: p[:, :, a0:a1].mean((0, 1)).cpu())


def landmark_keys(ctx: ReuseContext, fraction: float = 0.9) -> list[dict]:
    """Landmark-key counts per layer.

    Records: ``{layer, quantity, value, n_a}``; quantity ``"landmarks"`` (value = keys of A holding
    ``fraction`` of B's attention on A) and ``"a_mass"`` (value = the mean attention mass a B query
    puts on A at all, in [0, 1]). ``n_a`` is A's token count (landmarks / n_a is the figure's "% of
    tokens")."""
    check_share("landmarks", "fraction", fraction)
    out = []
    for l, mass in enumerate(a_key_mass(ctx)):
        ordered = torch.sort(mass.double(), descending=True).values
        # masses read as energies: the count reaching `fraction` of the total is energy_rank of their roots
        k = energy_rank(ordered.sqrt(), fraction)
        n_a = int(mass.numel())
        out.append({"layer": l, "quantity": "landmarks", "value": float(k), "n_a": n_a})
        out.append({"layer": l, "quantity": "a_mass", "value": float(mass.sum()), "n_a": n_a})
    return out
