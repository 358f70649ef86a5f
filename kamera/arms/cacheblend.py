"""CacheBlend (Yao et al., EuroSys 2025): recompute the tokens whose KV deviates most at a check layer.

Sources (``docs/baselines.md`` §1):
- Paper §4.2–4.3: selected tokens' Q/K/V are recomputed at each layer, overwrite the reused K/V and
  attend the full blended cache; tokens are chosen by KV deviation ("HKVD"); *gradual filtering*
  picks r1 % at layer 1, recomputes those at layer 2 and keeps r2 % < r1 %, "and so forth"; the
  loading controller's ratio is 15 %.
- Public code: ``YaoJiayi/CacheBlend`` at 55ad026, vllm_blend/vllm/model_executor/models/llama.py and
  vllm/attention/backends/xformers.py (one check layer, index 1; ``recomp_ratio`` 0.16; deviation
  ‖V_new − V_old‖², top ``int(ratio · n)``), and its successor ``LMCache/LMCache``
  (the 0.5.6 release) lmcache/v1/compute/blend/blender.py (check layer 1, ratio 0.15, deviation ‖K_new − K_old‖² after
  RoPE). Neither codebase implements gradual filtering (LMCache#845).

What this arm runs (:class:`kamera.reuse.recompute.PartialForward`): all of B's rows are run in context from
layer 0 through the check layer(s), carrying their hidden states; at a check layer each candidate's
fresh KV is compared with the reused KV of that layer and the top ``int(r · n_B)`` are kept; the
others are dropped and their KV is put back to the reused value at every layer they were run
(LMCache writes back only the selected rows at the check layer; we apply that to the layers
below it too, so that budget 0 is exactly blind reuse). The kept rows continue through every later
layer. Their queries attend the full context (the strongest form, Table 6 caption).

Default and why: ``filtering="single"`` with ``check_layer=1`` and ``ratio=0.15``, the form both
public codebases run and the one the paper compares (Table 5 "CacheBlend-15", Fig. 6b "CacheBlend
probes layer 1"). ``filtering="gradual"`` is the paper's §4.3 form: ``checks`` consecutive check
layers from ``check_layer``, the j-th keeping ``min(1, r + (checks − j)·step)`` of n_B, so the first
is slightly above r and the last is r (the paper gives no schedule; ``step=0.02`` is ours).
``deviation="value"`` (default) scores the content channel as the original repository does (V; on
MLA the latent c_KV, from which both keys and values are expanded); ``"key"`` scores the rotary
channel as LMCache does (K after RoPE; on MLA the decoupled k_pe; LMCache's blend serves no MLA model,
``infer_model_from_vllm`` takes Llama, Qwen2 and Qwen3 only, so on MLA "key" is our reading).

What the ratio counts (``count``): ``"b"`` (default) keeps ``int(r · n_B)`` of B's rows, so budget 0 is blind
reuse; ``"context"`` keeps ``int(r · n)`` with n the tokens of [prefix · A · B], the cached range, as both
codebases count it (the original repository's ``total_len − suffix_len``; LMCache's ``total_len`` of the tokens
its blender is handed, the request's first ``lmcache_cached_tokens``: the uncached query is vLLM's to compute,
outside the ratio); ``"prompt"`` counts the query too, which neither codebase does (a knob to show what that
reading costs: on a long query it recomputes more of B). Both codebases choose by deviation over all n rows;
here prefix and A carry the full prefill's KV (deviation 0: a recompute of them changes nothing), so that is
the top ``min(int(r · n), n_B)`` of B. ``at_least_one`` is LMCache's ``max(topk_num, 1)``.
``conf/arm/cacheblend_lmcache.yaml`` (key, context, at least one, 0.15) and ``cacheblend_original.yaml``
(value, context, 0.16) are the two codebases' settings; ``tests/arms/
test_parity.py`` checks the selection against each codebase's rule, restated line by line (docs/baselines.md
§1). A third reading of gradual filtering, CONDUIT's CacheBlend baseline (``cpa2001/CONDUIT``
nanovllm/engine/recompute.py ``build_cacheblend_layer_counts``: every token at layer 0, a monotone linear
narrowing to a target mean budget), is named there, not run.

Cost: ``bytes`` counts the K/V kept (the final selection on every layer, ``n_recomputed`` rows);
``computed_fraction`` counts every (row, layer) run, including the check-layer probe of rows later
dropped, which even budget 0 pays.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kamera.arms.base import Arm, ArmOutput, register
from kamera.arms.budget import cell_bytes
from kamera.arms.tokens import count_of, top_rows
from kamera.knobs import check_count, check_fraction
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import PartialForward

FILTERINGS = ("single", "gradual")
DEVIATIONS = ("value", "key")
COUNTS = ("b", "context", "prompt")


@register
@dataclass
class CacheBlendArm(Arm):
    name = "cacheblend"
    needs = frozenset({"full", "relocated"})
    drives_layers = True
    ratio: float = 0.15
    filtering: str = "single"
    check_layer: int = 1
    deviation: str = "value"
    checks: int = 3
    step: float = 0.02
    count: str = "b"
    at_least_one: bool = False

    def __post_init__(self) -> None:
        check_fraction(self.name, "ratio", self.ratio)
        check_count(self.name, "check_layer", self.check_layer)
        check_count(self.name, "checks", self.checks)
        check_fraction(self.name, "step", self.step)
        if self.filtering not in FILTERINGS:
            raise ValueError(f"cacheblend: filtering must be one of {FILTERINGS}, got {self.filtering!r}")
        if self.deviation not in DEVIATIONS:
            raise ValueError(f"cacheblend: deviation must be one of {DEVIATIONS}, got {self.deviation!r}")
        if self.count not in COUNTS:
            raise ValueError(f"cacheblend: count must be one of {COUNTS}, got {self.count!r}")
        if not isinstance(self.at_least_one, bool):
            raise ValueError(f"cacheblend: at_least_one must be a bool, got {self.at_least_one!r}")
        if self.checks == 0:
            raise ValueError("cacheblend: checks must be at least 1")

    def problems(self, device: str = "cpu", n_layers: int | None = None) -> list[str]:
        """Check layers beyond the model's depth (:meth:`schedule`), known from its config before load."""
        if n_layers is None:
            return []
        try:
            self.schedule(n_layers)
        except ValueError as err:
            return [str(err)]
        return []

    def schedule(self, n_layers: int) -> dict[int, float]:
        """Check layer → fraction of n_B kept there."""
        n_checks = 1 if self.filtering == "single" else self.checks
        last = self.check_layer + n_checks - 1
        if last >= n_layers:
            raise ValueError(
                f"cacheblend: check layers {self.check_layer}..{last} exceed the model's {n_layers} layers"
            )
        ratios = [min(1.0, self.ratio + (n_checks - 1 - j) * self.step) for j in range(n_checks)]
        return {self.check_layer + j: r for j, r in enumerate(ratios)}

    def kept(self, ratio: float, ctx: ReuseContext) -> int:
        """How many rows a check layer keeps at ``ratio`` (``count``, ``at_least_one``), at most n_B."""
        if self.count == "b":
            k = count_of(ratio, ctx.n_b, "floor")
        else:  # the authors' int() over [prefix · A · B] (context) or [prefix · A · B · query] (prompt)
            k = int(ratio * ctx.ranges[ctx.b if self.count == "context" else -1][1])
        return min(max(k, 1) if self.at_least_one else k, ctx.n_b)

    def run(self, ctx: ReuseContext) -> ArmOutput:
        n_layers, n_b = ctx.adapter.n_layers, ctx.n_b
        checks = self.schedule(n_layers)
        content = self.deviation == "value"
        channel = next(i for i, s in enumerate(ctx.adapter.specs) if (s.rotary is None) == content)
        pf = PartialForward(ctx)
        cand = torch.arange(n_b, device=ctx.adapter.device)
        hidden = pf.entry_hidden(0, cand)
        for l in range(n_layers):
            if cand.numel() == 0:
                break
            hidden = pf.step(l, cand, hidden)
            if l in checks:
                fresh = pf.current(l, cand)[channel].float()
                old = pf.base.layers[l][channel][cand].float()
                dev = (fresh - old).pow(2).flatten(1).sum(1)
                keep = top_rows(dev, min(self.kept(checks[l], ctx), int(cand.numel())))
                dropped = torch.ones(cand.numel(), dtype=torch.bool, device=cand.device)
                dropped[keep] = False
                pf.restore(range(l + 1), cand[dropped])
                cand, hidden = cand[keep], hidden[keep]
        rec = pf.result()
        out = ctx.query(rec.kv, tag=self.name)
        params = {
            **self.params(),
            "check_layers": sorted(checks),
            "check_ratios": [checks[l] for l in sorted(checks)],
            "n_recomputed": int(cand.numel()),
            "recompute_fraction": int(cand.numel()) / n_b,
            "computed_fraction": rec.cells / (n_b * n_layers),
        }
        return ArmOutput(out, rec.n_written_cells * cell_bytes(ctx), params, recomputed_tokens=rec.cells)
