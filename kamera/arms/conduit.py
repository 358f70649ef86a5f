"""CONDUIT (Chen et al., arXiv 2609.05821; MIT code): recompute the reused image tokens
that carry the most to the query.

Source: ``cpa2001/CONDUIT`` at 96c71d2, nanovllm/engine/recompute.py (``compute_query_attention_mass``,
``build_kv_score_candidate_scores``, ``apply_kv_score_image_score_bias``, ``select_kv_score_positions``,
``_resolve_selector_count``) and nanovllm/engine/model_runner_kv_score.py (``_select_runtime_recompute``): a first
pass runs the prompt's text over the cached image KV and keeps each layer's query rows (the trailing text, the
question); token t's score at layer ℓ is the attention mass the query puts on it (softmax over the keys each query
row sees, summed over query rows and heads, over n_q · n_heads) times ‖V_ℓ(t)‖ (``CONDUIT_SCORE_USE_V_NORM``, the
"throughput score" s_t = ᾱ_t · ‖V_t‖); scores are averaged over layers, reweighted per image by c_j (the image's
mean score over the images' mean, lerped from 1 by ``image_bias``; c_1 = 1 for one image), and the top
``ceil(ratio · N)`` of the N image tokens are recomputed at every layer with the text. Default ratio 0.10 (the
paper's "10% refresh budget", the scripts' ``RATIO_VALUES=10``).

Choices where the harness differs:
- The first pass reads B's cached KV as blind reuse leaves it (R(δ)·KV(B|∅)) behind the prefix and A as the full
  prefill left them; only the query's rows run (CONDUIT's first pass also re-runs the prompt's other text, which
  here is already exact outside B). Its query rows' KV is computed in that pass (the slot it starts from is zero).
- Candidates are B's visual tokens; "text" (default True, as CONDUIT recomputes all text) adds B's own text rows.
- Layers: every layer's score is averaged (the code's default when no score layer is set; its scripts pick score
  layers per model, which are not published with the paper).
- ``image_bias`` 1.0 applies c_j as the paper states it; the code's default strength is 0.0 (its single-image
  table sets it so, since c_1 = 1).
- On MLA, ‖V‖ is the norm of the cached latent c_KV row (the values are expanded from it).
Cost: one extra pass of the query's rows over the spliced cache (tag ``conduit_probe``), shared per item.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kamera.arms.base import ArmRefusal, register
from kamera.arms.tokens import ImageTokenArm, top_rows, visual_runs
from kamera.core import ChunkKV
from kamera.knobs import check_fraction
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import LayerDriver, attention_to, shared


def query_mass_blind(ctx: ReuseContext) -> list[torch.Tensor]:
    """Per layer, [n_B] float64: the attention mass the query's rows put on each B row with B blind-reused, over query
    rows and heads divided by n_q · n_heads (CONDUIT's ``compute_query_attention_mass``)."""

    def make() -> list[torch.Tensor]:
        q = ctx.full_kv(ctx.q)
        empty = ChunkKV(q.specs, [tuple(torch.zeros_like(t) for t in lay) for lay in q.layers], q.positions, q.state)
        driver = LayerDriver(ctx.adapter, ctx.enc.spans, [*ctx.context_kv, ctx.relocated, empty], "conduit_probe")
        q0, q1 = ctx.ranges[ctx.q]
        b0, b1 = ctx.ranges[ctx.b]
        rows = torch.arange(q0, q1, device=ctx.adapter.device)
        return attention_to(
            driver, rows, ctx.enc.spans[ctx.q].embeds, carry=True, reduce=lambda probs: query_mass(probs)[b0:b1]
        )

    return shared(ctx, "conduit_query_mass", make)


def query_mass(probs: torch.Tensor) -> torch.Tensor:
    """[heads, q, S] attention probabilities → [S] float64: summed over query rows and heads, over n_q · n_heads."""
    return probs.sum((0, 1)).double() / (probs.shape[0] * probs.shape[1])


def throughput_scores(
    mass: list[torch.Tensor], values: list[torch.Tensor], image: torch.Tensor, strength: float
) -> torch.Tensor:
    """Per candidate: the layer mean of attention mass × ‖V‖ (``mass[ℓ]`` [n], ``values[ℓ]`` [n, heads, dim]), times
    its image's coefficient c_j (:func:`image_coefficients`)."""
    scores = torch.stack([m * v.double().flatten(1).norm(dim=-1) for m, v in zip(mass, values, strict=True)]).mean(0)
    return scores * image_coefficients(scores, image, strength)


def image_coefficients(scores: torch.Tensor, image: torch.Tensor, strength: float) -> torch.Tensor:
    """c_j per candidate: image j's mean (non-negative) score over the mean of the images' means, lerped from 1 by
    ``strength`` (CONDUIT's ``apply_kv_score_image_score_bias``); all ones for one image."""
    n = int(image.max()) + 1
    sums = torch.zeros(n, dtype=scores.dtype).scatter_add_(0, image, scores.clamp(min=0))
    means = sums / torch.bincount(image, minlength=n).to(scores.dtype)
    importance = means / means.mean().clamp_min(1e-12)
    return torch.lerp(torch.ones_like(importance), importance, strength)[image]


@register
@dataclass
class ConduitArm(ImageTokenArm):
    name = "conduit"
    ratio: float = 0.10
    image_bias: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fraction(self.name, "ratio", self.ratio)
        check_fraction(self.name, "image_bias", self.image_bias)

    def select(self, ctx: ReuseContext) -> tuple[torch.Tensor, dict]:
        runs = visual_runs(ctx)
        if not runs:
            raise ArmRefusal(f"{self.name}: B has no image tokens on this item; the arm selects among them")
        cand = torch.cat([torch.arange(a, z) for a, z in runs])
        image = torch.cat([torch.full((z - a,), j) for j, (a, z) in enumerate(runs)])
        content = next(i for i, s in enumerate(ctx.adapter.specs) if s.rotary is None)
        scores = throughput_scores(
            [m.cpu()[cand] for m in query_mass_blind(ctx)],
            [lay[content].cpu()[cand] for lay in ctx.relocated.layers],
            image,
            self.image_bias,
        )
        budget = min(cand.numel(), math.ceil(self.ratio * cand.numel() - 1e-9))
        picked = [cand[top_rows(scores, budget)]]
        if self.text:
            picked.append(torch.nonzero(~ctx.enc.spans[ctx.b].visual.cpu()).flatten())
        rows = torch.unique(torch.cat(picked)).to(ctx.adapter.device)
        return rows, {"n_images": len(runs), "image_tokens": int(cand.numel()), "image_recomputed": budget}
