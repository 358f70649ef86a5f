"""Replay one trace through a list of policies on one window item: one row per (policy, step).

Steps run in order; at each step every policy builds its window's KV (:mod:`kamera.agent.policies`) and runs the
query on it. The step's reference, the re-prefill of the agent's window, is a resource of the item's
:class:`~kamera.window.context.WindowContext`: computed once and read by every policy (and by ``recompute``, whose
answer it is); so is blind reuse of the window (every chunk R(δ)·KV(c|∅), the leading one as is), the
denominator of η. Each policy keeps its own :class:`~kamera.agent.store.Store` (the same capacity and eviction
rule for all) and its own live window across steps.

Row measures (docs/agent.md): ``step``, ``window`` and ``placed`` (chunk ids), ``n_window_tokens``, what the policy
ran (``tokens`` prefilled, ``forwards`` conditioned, ``solo_forwards`` canonical, ``svds``, ``flops`` in the cost
model), the store (``bytes_read``, ``bytes_written``, ``bytes_stored`` after the step, ``evictions``), fidelity at
the step's query (``kl`` to the re-prefill of the agent's window, ``kl_blind``, ``eta``, ``kl_placed`` to the
re-prefill of the placed window, ``pred``, ``ref_pred``, ``agree``, ``gold``, ``correct``, ``flip``,
``recovered``), ``actions`` (JSON: what each chunk took), ``seconds`` (the policy's wall time on the step; for
``recompute`` the shared re-prefill's) and running totals ``cum_tokens``, ``cum_flops``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import NamedTuple

import torch

from kamera.agent.policies.base import Policy
from kamera.agent.session import Meter, Session
from kamera.agent.store import Store, chunk_digest
from kamera.agent.trace import Trace
from kamera.metrics import choice_argmax, eta, flipped, kl, recovered
from kamera.models.flops import ModelFlops
from kamera.window.context import WindowContext, WindowView
from kamera.window.ops import Layout


def digests(wctx: WindowContext) -> list[str]:
    """Each chunk's content digest (token ids, input embeddings, local positions, deepstack features), by chunk id."""
    return [chunk_digest(c.input_ids, c.embeds, c.local_pos, *(c.deepstack or ())) for c in wctx.chunks]


def view_of(wctx: WindowContext, order: Sequence[int]) -> WindowView:
    return wctx.view(Layout(tuple(order[:-1]), order[-1]))


def blind_logits(wctx: WindowContext, window: tuple[int, ...]) -> torch.Tensor:
    """Blind reuse of the whole window (each chunk's canonical moved to its slot by R(δ)); computed once per window."""

    def make() -> torch.Tensor:
        view = view_of(wctx, window)
        probe = Session(wctx, [], Store())
        kvs = [probe.moved(view, j, wctx.canonical(c)) for j, c in enumerate(window)]
        return probe.query(view, kvs).logits

    return wctx.resource(("agent_blind", window), make)


class Reference(NamedTuple):
    """A step's measures every policy shares: the re-prefill of the agent's window (its ``logits``, wall
    ``seconds`` and predicted choice ``pred``), blind reuse's ``blind`` logits and ``kl_blind`` to it (η's
    denominator), and the item's ``gold`` answer for the window."""

    logits: torch.Tensor
    seconds: float
    blind: torch.Tensor
    kl_blind: float
    pred: int
    gold: str | None


def reference(wctx: WindowContext, window: tuple[int, ...]) -> Reference:
    """The step's :class:`Reference` (the re-prefill and blind reuse are the item's shared resources)."""
    t0 = time.perf_counter()
    ref = view_of(wctx, window).full.logits
    seconds = time.perf_counter() - t0
    blind = blind_logits(wctx, window)
    return Reference(ref, seconds, blind, kl(ref, blind), choice_argmax(ref, wctx.choice_ids), wctx.item.answer(window))


def _check_chunks(wctx: WindowContext, trace: Trace, n_chunks: int) -> None:
    """ValueError naming the chunk ids ``trace`` reads that the item does not have."""
    bad = [c for c in trace.chunks if c >= n_chunks]
    if bad:
        raise ValueError(f"trace reads chunk id(s) {bad}; item {wctx.item.item_id} has chunks 0..{n_chunks - 1}")


def _run(
    s: Session, policy: Policy, window: tuple[int, ...], ref_seconds: float
) -> tuple[tuple[int, ...], WindowView, torch.Tensor, float]:
    """The policy's step on its session: the order it places the window in, that view, the query's logits on the
    KV it builds (the view's re-prefill where it builds none) and its wall time (then the shared re-prefill's);
    the placed window, with each chunk's antecedents and KV, becomes the session's live one."""
    t1 = time.perf_counter()
    order = policy.order(s, window)
    view = s.view(order)
    kvs = policy.build(s, view, order)
    logits = view.full.logits if kvs is None else s.query(view, kvs).logits
    seconds = time.perf_counter() - t1 + (ref_seconds if kvs is None else 0.0)
    if kvs is None:
        kvs = [view.full_kv(s.slot(view, j)) for j in range(len(order))]
    s.live = {c: (s.antecedents(order, j), kvs[j]) for j, c in enumerate(order)}
    s.seen |= set(order)
    s.placed = order
    return order, view, logits, seconds


def _fidelity(
    wctx: WindowContext,
    ref: Reference,
    window: tuple[int, ...],
    order: tuple[int, ...],
    view: WindowView,
    logits: torch.Tensor,
    k: float,
) -> dict:
    """Fidelity at the step's query: ``k`` (the KL to the re-prefill of the agent's window), blind's, η, the KL to
    the re-prefill of the placed window, the answers and whether blind reuse flips it and the policy recovers it."""
    choices = wctx.choice_ids
    return {
        "kl": k,
        "kl_blind": ref.kl_blind,
        "eta": eta(k, ref.kl_blind, wctx.eta_floor),
        "kl_placed": k if order == tuple(window) else kl(view.full.logits, logits),
        "pred": wctx.answer_text(logits),
        "ref_pred": wctx.answer_text(ref.logits),
        "agree": choice_argmax(logits, choices) == ref.pred,
        "gold": ref.gold,
        "correct": None if ref.gold is None else wctx.answer_text(logits) == ref.gold,
        "flip": flipped(ref.blind, ref.logits, choices),
        "recovered": recovered(logits, ref.logits, choices),
    }


def _step(
    s: Session, label: str, policy: Policy, t: int, window: tuple[int, ...], ref: Reference, prev: dict | None
) -> dict:
    """One policy's row at step ``t`` (module docstring): what it ran, its store's traffic, its fidelity, the
    running totals after ``prev`` (its previous row)."""
    wctx = s.wctx
    s.meter, store, s.step = Meter(), s.store, t
    store.begin_step()
    read0, written0, evicted0 = store.bytes_read, store.bytes_written, store.evictions
    order, view, logits, seconds = _run(s, policy, window, ref.seconds)
    k = kl(ref.logits, logits, what=f"re-prefill ‖ {label}, item {wctx.item.item_id} step {t}")
    prev = prev or {"cum_tokens": 0, "cum_flops": 0.0}
    m = s.meter
    return {
        "step": t,
        "window": json.dumps(list(window)),
        "placed": json.dumps(list(order)),
        "n_window_tokens": sum(s.n_tokens(c) for c in window),
        "tokens": m.tokens,
        "forwards": m.forwards,
        "solo_forwards": m.solo_forwards,
        "svds": m.svds,
        "flops": m.flops,
        "bytes_read": store.bytes_read - read0,
        "bytes_written": store.bytes_written - written0,
        "bytes_stored": store.held,
        "evictions": store.evictions - evicted0,
        **_fidelity(wctx, ref, window, order, view, logits, k),
        "actions": json.dumps(dict(sorted(m.actions.items()))),
        "seconds": seconds,
        "cum_tokens": prev["cum_tokens"] + m.tokens,
        "cum_flops": prev["cum_flops"] + m.flops,
    }


def replay(
    wctx: WindowContext,
    trace: Trace,
    policies: Sequence[tuple[str, Policy]],
    capacity: int | None = None,
    eviction: str = "lru",
    flops: ModelFlops | None = None,
    stores: dict[str, Store] | None = None,
    keep: int | None = None,
) -> dict[str, list[dict]]:
    """Rows by policy label: one per step of ``trace``, in step order. ``stores``: a policy's store carried in from
    an earlier replay (a cache that serves many traces), by label; else each starts empty. ``keep``: bytes the item's
    context keeps between steps (its least recently used windows released, recomputed if a later step asks)."""
    ids = digests(wctx)
    _check_chunks(wctx, trace, len(ids))
    stores = stores or {}
    sessions = {
        label: Session(wctx, ids, stores.get(label) or Store(capacity, eviction), flops) for label, _ in policies
    }
    rows: dict[str, list[dict]] = {label: [] for label, _ in policies}
    for label, policy in policies:
        policy.begin(sessions[label], trace)
    for t, window in enumerate(trace.steps):
        ref = reference(wctx, window)
        for label, policy in policies:
            prev = rows[label][-1] if rows[label] else None
            rows[label].append(_step(sessions[label], label, policy, t, window, ref, prev))
        if keep is not None:
            wctx.trim(keep)
    return rows
