"""The orbit patch (§5 "Reorder"): one patch averaged over orderings of A, tested on a held-out ordering.

Source: the paper §5: "a single patch averaged over the permutation orbit with the test ordering
held out", tested exhaustively at K = 3 and K = 4 (3! and 4! orderings) and sampled at K = 6 (24 of
720). The mean deficit over the orbit is decomposed once (:func:`kamera.core.orbit_mean`, then the
same per-layer-channel SVD as the patch) and applied to R(δ)·KV(B|∅) in the item's own ordering,
whose re-prefill is the reference.

Knobs and choices:
- ``rank`` m (default 16; None = full) of the content channel, and ``rotary_rank`` of the rotary one
  ("auto": m on GQA / MHA, ⌈m/4⌉ on MLA's k_pe), as for the patch arm (:mod:`kamera.arms.patch`).
- ``hold_out`` (default True): the item's own ordering of A is left out of the orbit, so the patch is
  tested on an ordering it never saw. Items with a single A chunk have no other ordering and are
  refused at run time.
- Orderings: every permutation of A when K ≤ ``exhaustive_up_to`` (4), else ``samples`` (24)
  distinct permutations drawn with ``seed``; ``orderings`` lists them explicitly instead (each a
  permutation of 0 … K−1, in A's item order).
- Each ordering costs one conditioned forward over ``[prefix · A_π · B]`` (tag
  ``orbit_conditioned``); the item's own ordering reuses the shared full forward. Permuting A keeps
  B's native positions (A's total extent is unchanged), so every Δ_π sits in the same frame.
  Forwards and the orbit SVD are cached per item, so a rank sweep pays them once.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

from kamera.arms.base import Arm, ArmOutput, ArmRefusal, register
from kamera.arms.patch import AUTO, check_rotary_rank, patch_columns, truncated
from kamera.core import ChunkKV, Patch, deficit, orbit_mean
from kamera.knobs import check_count
from kamera.models.base import place
from kamera.reuse.context import ReuseContext
from kamera.reuse.recompute import shared

Ordering = tuple[int, ...]


def conditioned_in_order(ctx: ReuseContext, order: Ordering) -> ChunkKV:
    """KV(B | A in ``order``) at B's native positions: one forward over [prefix · A_π · B], cached."""
    a_idx = ctx.enc.index("A")
    if list(order) == list(range(len(a_idx))):
        return ctx.conditioned

    def make() -> ChunkKV:
        head = [ctx.enc.spans[0]] if ctx.has_prefix else []
        spans = [*head, *(ctx.enc.spans[a_idx[i]] for i in order), ctx.enc.spans[ctx.b]]
        out = ctx.adapter.forward(place(spans, ctx.offset), tag="orbit_conditioned")
        n = sum(s.n_tokens for s in spans)
        return ctx.adapter.read(out.cache, n - ctx.n_b, n, ctx.native_positions(ctx.b))

    return shared(ctx, f"conditioned_in_order:{order}", make)


@register
@dataclass
class OrbitArm(Arm):
    name = "orbit"
    needs = frozenset({"relocated", "conditioned"})
    rank: int | None = 16
    rotary_rank: int | str | None = AUTO
    hold_out: bool = True
    exhaustive_up_to: int = 4
    samples: int = 24
    seed: int = 0
    orderings: list[list[int]] | None = None

    def __post_init__(self) -> None:
        check_count(self.name, "rank", self.rank, allow_none=True)
        check_rotary_rank(self.name, self.rotary_rank)
        check_count(self.name, "exhaustive_up_to", self.exhaustive_up_to)
        check_count(self.name, "samples", self.samples)
        check_count(self.name, "seed", self.seed)
        if not isinstance(self.hold_out, bool):
            raise ValueError(f"orbit: hold_out must be a bool, got {self.hold_out!r}")
        if self.orderings is not None and not (isinstance(self.orderings, list) and self.orderings and all(
                isinstance(o, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in o)
                for o in self.orderings)):
            raise ValueError(f"orbit: orderings must be null or a list of orderings (lists of chunk indices), got "
                             f"{self.orderings!r}")
        if self.orderings is not None and len({tuple(o) for o in self.orderings}) != len(self.orderings):
            raise ValueError(f"orbit: orderings must be distinct, got {self.orderings!r}")

    def orbit(self, k: int) -> tuple[list[Ordering], bool]:
        """The orderings averaged over for K = k chunks of A, and whether they are the whole orbit."""
        identity = tuple(range(k))
        if self.orderings is not None:
            chosen = [tuple(o) for o in self.orderings]
            bad = [o for o in chosen if sorted(o) != list(identity)]
            if bad:  # the orderings fit items of another K: this item is refused (recorded), the job goes on
                raise ArmRefusal(f"orbit: orderings {bad} are not permutations of this item's K = {k} A chunks "
                                 f"(0..{k - 1})")
            if self.hold_out and identity in chosen:
                raise ArmRefusal("orbit: hold_out=True but the item's own ordering is among the orderings")
            exhaustive = len(chosen) == math.factorial(k) - self.hold_out
        elif k <= self.exhaustive_up_to:
            chosen = [p for p in itertools.permutations(identity) if not (self.hold_out and p == identity)]
            exhaustive = True
        else:
            rng = random.Random(self.seed)
            seen: set[Ordering] = {identity} if self.hold_out else set()
            chosen = []
            while len(chosen) < min(self.samples, math.factorial(k) - self.hold_out):
                p = tuple(rng.sample(identity, k))
                if p not in seen:
                    seen.add(p)
                    chosen.append(p)
            exhaustive = False
        if not chosen:
            raise ArmRefusal(
                f"orbit: no ordering to average over (K = {k} chunk(s) of A, hold_out={self.hold_out}); "
                "holding out the test ordering needs at least 2 A chunks"
            )
        return chosen, exhaustive

    def run(self, ctx: ReuseContext) -> ArmOutput:
        k = len(ctx.enc.index("A"))
        chosen, exhaustive = self.orbit(k)

        def make() -> Patch:
            deficits = [deficit(conditioned_in_order(ctx, o), ctx.relocated) for o in chosen]
            return Patch.form(orbit_mean(deficits), "layer", dtype=ctx.adapter.dtype)

        patch = truncated(shared(ctx, f"orbit_patch:{sorted(chosen)}", make), self.rank, self.rotary_rank,
                          ctx.adapter.attention)
        out = ctx.query(patch.apply(ctx.relocated), tag=self.name)
        params = {
            **self.params(),
            "n_a": k,
            "n_orderings": len(chosen),
            "exhaustive": exhaustive,
            **patch_columns(patch),
        }
        return ArmOutput(out, patch.nbytes(), params, patch_dtype=params["patch_dtype"])
