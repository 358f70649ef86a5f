"""``kamera``: the paper's menu (Table 2) over a content-addressed store of canonicals and patches.

Each chunk c at window slot j, behind antecedents A = the chunks in front of it, takes the first that applies:

    leading       j = 0: its canonical KV(c|∅) as is (prefilled behind the prefix, so δ = 0: free and exact)
    keep          c held the same antecedents (in order) last step: its KV as it was (exact to what it was)
    hit           a patch formed behind exactly A (by content digests, in order) is stored: R(δ)·KV(c|∅) + patch
    survivor      c's antecedents last step were A with leading chunks in front (a slide evicted them): its KV
                  moved by R(δ) (``survivors: relocate``; ``patch`` treats it as a new antecedent)
    orbit         a patch formed behind another order of A's set is stored (``orbit: true``): that patch
    cascade_skip  c was live and chunks were re-instated in front of it (its old antecedents are a subsequence of
                  A): the recall cascade (``cascade``): ``eager`` re-patches it (hit or form), ``lazy`` uses a stored
                  patch when there is one else moves its KV by R(δ), ``never`` always moves it
    form          otherwise (a new antecedent, a recalled chunk): prefilled behind the KV assembled so far (a run of
                  such chunks in one conditioned forward), used as computed, and stored for reuse behind A

What a formed chunk leaves in the store (the stated rule, ``store_as``): its rank-m patch (with its canonical)
when the factors take fewer bytes than the chunk's page, else the conditioned page itself (``auto``); ``patch``
or ``page`` force one. A set-keyed (orbit) entry is written by the first order of a set that forms it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.agent.policies.base import Policy, register
from kamera.agent.session import Session
from kamera.agent.store import orbit_key, patch_key
from kamera.core import ChunkKV, Patch, family_rank_view
from kamera.window.context import WindowView

STORE_AS = ("auto", "patch", "page")
SURVIVORS = ("relocate", "patch")
CASCADES = ("eager", "lazy", "never")
APPROXIMATE = ("survivor", "orbit", "cascade_skip")


def _subsequence(short: tuple, long: tuple) -> bool:
    it = iter(long)
    return len(short) < len(long) and all(x in it for x in short)


def patch_bytes(kv: ChunkKV, m: int | None) -> int:
    """Bytes of a rank-m patch of ``kv`` (one block per layer-channel: r·(n + width) in the KV's dtype)."""
    n, size = kv.n_tokens, kv.dtype.itemsize
    total = 0
    for _ in kv.layers:
        for spec in kv.specs:
            w = spec.heads * spec.dim
            r = min(n, w) if m is None else min(m, n, w)
            total += r * (n + w) * size
    return total


@register
@dataclass
class Kamera(Policy):
    """The Table 2 menu; knobs: patch ``rank`` m (None: full), ``store_as``, ``survivors``, ``orbit``, ``cascade``."""

    name = "kamera"
    rank: int | None = 16
    store_as: str = "auto"
    survivors: str = "relocate"
    orbit: bool = True
    cascade: str = "eager"

    def __post_init__(self) -> None:
        if self.rank is not None and (
            isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1
        ):
            raise ValueError(f"{self.name}: rank={self.rank!r}: an integer >= 1, or null (full rank)")
        for knob, allowed in (("store_as", STORE_AS), ("survivors", SURVIVORS), ("cascade", CASCADES)):
            if getattr(self, knob) not in allowed:
                raise ValueError(f"{self.name}: {knob}={getattr(self, knob)!r}: one of {list(allowed)}")
        if not isinstance(self.orbit, bool):
            raise ValueError(f"{self.name}: orbit={self.orbit!r}: true or false")

    # ----- the menu, symbolically (placement asks it too) ------------------------------------------
    def action(self, s: Session, j: int, chunk: int, ants: tuple[str, ...]) -> str:
        """What chunk ``chunk`` takes at slot j behind antecedent digests ``ants`` (reads the store's keys and the
        live window only)."""
        if j == 0:
            return "leading"
        prev = s.live[chunk][0] if chunk in s.live else None
        if prev == ants:
            return "keep"
        d = s.digests[chunk]
        grew = prev is not None and _subsequence(prev, ants)
        if grew and self.cascade == "never":
            return "cascade_skip"
        if patch_key(d, ants) in s.store:
            return "hit"
        if (
            prev is not None
            and self.survivors == "relocate"
            and len(prev) > len(ants)
            and prev[len(prev) - len(ants) :] == ants
        ):
            return "survivor"
        if self.orbit and orbit_key(d, ants) in s.store:
            return "orbit"
        if grew and self.cascade == "lazy":
            return "cascade_skip"
        return "form"

    def plan(self, s: Session, order: tuple[int, ...]) -> list[str]:
        return [self.action(s, j, c, s.antecedents(order, j)) for j, c in enumerate(order)]

    # ----- building the window -----------------------------------------------------------------------
    def build(self, s: Session, view: WindowView, order: tuple[int, ...]) -> list[ChunkKV]:
        acts = self.plan(s, order)
        kvs: list[ChunkKV] = []
        while len(kvs) < len(order):
            j = len(kvs)
            if acts[j] != "form":
                kvs.append(self.reuse(s, view, order, j, acts[j]))
                continue
            run = [j]
            while run[-1] + 1 < len(order) and acts[run[-1] + 1] == "form":
                run.append(run[-1] + 1)
            new = s.prefill(view, kvs, run)
            for i, kv in zip(run, new, strict=True):
                self.keep_formed(s, view, order, i, kv)
            kvs += new
        s.meter.actions.update(acts)
        s.meter.actions["recall"] += sum(1 for c in order if c in s.seen and c not in s.live)
        return kvs

    def reuse(self, s: Session, view: WindowView, order: tuple[int, ...], j: int, act: str) -> ChunkKV:
        c = order[j]
        if act == "leading":
            return s.placed_canonical(view, j, c)
        if act in ("keep", "survivor", "cascade_skip"):
            return s.moved(view, j, s.live[c][1])
        key = (patch_key if act == "hit" else orbit_key)(s.digests[c], s.antecedents(order, j))
        kind, value = s.store.get(key)
        if kind == "page":
            return s.moved(view, j, value)
        base = s.placed_canonical(view, j, c)
        patch: Patch = value
        delta = int(base.positions.reshape(-1)[0] - patch.positions.reshape(-1)[0])
        return (patch.relocate(delta) if delta else patch).apply(base)

    def keep_formed(self, s: Session, view: WindowView, order: tuple[int, ...], j: int, kv: ChunkKV) -> None:
        """Keep a formed chunk for reuse behind its antecedents: its rank-m patch or its page (``store_as``)."""
        if j == 0:
            return
        c, ants = order[j], s.antecedents(order, j)
        page = kv.nbytes()
        as_page = self.store_as == "page" or (self.store_as == "auto" and patch_bytes(kv, self.rank) >= page)
        if as_page:
            value, nbytes = ("page", kv), page
        else:
            patch = family_rank_view(s.form(view, j, c, kv), self.rank, s.adapter.attention)
            value, nbytes = ("patch", patch), patch.nbytes()
        s.store.put(patch_key(s.digests[c], ants), value, nbytes, kv.n_tokens)
        if self.orbit and orbit_key(s.digests[c], ants) not in s.store:
            s.store.put(orbit_key(s.digests[c], ants), value, nbytes, kv.n_tokens)

    def tokens_at(self, s: Session, j: int, chunk: int, ants: tuple[str, ...]) -> tuple[float, bool]:
        """(tokens chunk ``chunk`` would prefill at slot j behind ``ants``, whether its KV would be approximate)."""
        act = self.action(s, j, chunk, ants)
        n = s.n_tokens(chunk)
        return (n if act == "form" else 0) + (
            n if act == "leading" and not s.has_canonical(chunk) else 0
        ), act in APPROXIMATE
