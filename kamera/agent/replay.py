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
    bad = [c for c in trace.chunks if c >= len(ids)]
    if bad:
        raise ValueError(
            f"trace reads chunk id(s) {bad}; item {wctx.item.item_id} has chunks 0..{len(ids) - 1}"
        )
    stores = stores or {}
    sessions = {
        label: Session(wctx, ids, stores.get(label) or Store(capacity, eviction), flops)
        for label, _ in policies
    }
    rows: dict[str, list[dict]] = {label: [] for label, _ in policies}
    for label, policy in policies:
        policy.begin(sessions[label], trace)
    choices = wctx.choice_ids
    for t, window in enumerate(trace.steps):
        t0 = time.perf_counter()
        ref_view = view_of(wctx, window)
        ref = ref_view.full.logits
        ref_seconds = time.perf_counter() - t0
        blind = blind_logits(wctx, window)
        kl_blind = kl(ref, blind)
        ref_pred = choice_argmax(ref, choices)
        gold = wctx.item.answer(window)
        for label, policy in policies:
            s = sessions[label]
            s.meter, store, s.step = Meter(), s.store, t
            store.begin_step()
            read0, written0, evicted0 = store.bytes_read, store.bytes_written, store.evictions
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
            pred = choice_argmax(logits, choices)
            k = kl(ref, logits, what=f"re-prefill ‖ {label}, item {wctx.item.item_id} step {t}")
            prev = rows[label][-1] if rows[label] else {"cum_tokens": 0, "cum_flops": 0.0}
            m = s.meter
            rows[label].append(
                {
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
                    "kl": k,
                    "kl_blind": kl_blind,
                    "eta": eta(k, kl_blind, wctx.eta_floor),
                    "kl_placed": k if order == tuple(window) else kl(view.full.logits, logits),
                    "pred": wctx.answer_text(logits),
                    "ref_pred": wctx.answer_text(ref),
                    "agree": pred == ref_pred,
                    "gold": gold,
                    "correct": None if gold is None else wctx.answer_text(logits) == gold,
                    "flip": flipped(blind, ref, choices),
                    "recovered": recovered(logits, ref, choices),
                    "actions": json.dumps(dict(sorted(m.actions.items()))),
                    "seconds": seconds,
                    "cum_tokens": prev["cum_tokens"] + m.tokens,
                    "cum_flops": prev["cum_flops"] + m.flops,
                }
            )
        if keep is not None:
            wctx.trim(keep)
    return rows
