"""Fig. 12 inside vLLM, one item at a time: the item's arms spliced through the KV connector, measured against vLLM's
own re-prefill (an engine job's measurement, :mod:`kamera.engine.shape`; ``scripts/gpu_check.py --engine``).

An item is random token ids [prefix · A · B · query] with a four-way choice at the answer (:func:`items`:
``bench=engine_mc``, :mod:`kamera.engine.benches`). Per item
vLLM prefills the full prompt and the connector captures it (the re-prefill: its next-token log-probs, KV(B|A) and
the exact prefix · A KV), [prefix · B] is prefilled and captured (the canonical KV(B|∅)), and the patch is formed
from the two captures with kamera's operator and stored. Each arm but the re-prefill is then one request that claims
[prefix · A · B] through the connector (prefix · A exact, B as the arm builds it: not re-rotated, R(δ) only, or
patched at rank m) and computes only the query; its written KV is captured back from the cache. Two more requests
time vLLM's prefill of the prompt and a rank-64 splice without captures (Fig. 11(b)'s engine source).

On an M-RoPE (VL) model an image sits in the middle of A and one at the head of B (random pixels seeded by the
item, :func:`kamera.engine.verify.image`), each between its vision markers and expanded by the checkpoint's
processor: the cached chunk B then starts with image tokens, and δ is the position rows' shift (A's image advances
them by its grid side), not B's token offset.
"""

from __future__ import annotations

import json

import torch

from kamera.core import ChunkKV, Patch, deficit, relocate
from kamera.engine.benches.engine_mc import SPEC
from kamera.engine.family import mrope
from kamera.engine.store import save_patch
from kamera.engine.verify import image
from kamera.metrics import bf16_ulps, bf16_vector_ulps, kl

CHOICES = SPEC.choices  # the answer tokens a multiple-choice item reads its prediction from
TIMING_RANK = 64  # the rank of the splice the timing request serves


def items(n: int, seed: int = 0) -> list[dict]:
    """``n`` items of :data:`kamera.engine.benches.engine_mc.SPEC` (item i is the same for every ``n``)."""
    return SPEC.items(n, seed)


def ulp_stats(got: ChunkKV, ref: ChunkKV) -> dict:
    """How far B's K and V (each channel) are from ``ref`` in bf16 ULPs, on both scales of :mod:`kamera.metrics.ulp`.

    Per element (:func:`kamera.metrics.bf16_ulps`, each element at its own reference value): the fractions of
    elements equal to / within one / within four ULPs, over every layer and over layer 0 alone (which isolates
    relocation), and the maximum, ``ulp_max_element`` (every layer) and ``ulp_max_element_l0``. Per vector
    (:func:`kamera.metrics.bf16_vector_ulps`, each element at the largest reference magnitude of its token-head
    vector, so an element whose reference is near zero cannot blow it up): the maximum per layer and channel, as
    ``ulp_max`` (every layer), ``ulp_max_l0`` and ``ulp_max_by_layer`` (JSON: channel name → one maximum per layer)."""
    def distances(layers: range) -> torch.Tensor:
        return torch.cat([bf16_ulps(got.layers[l][c], ref.layers[l][c]).flatten() for l in layers
                          for c in range(len(got.specs))])

    every, first = distances(range(got.n_layers)), distances(range(1))
    eq, le1, le4 = (float(x.double().mean()) for x in (every == 0, every <= 1, every <= 4))
    eq0, le10, le40 = (float(x.double().mean()) for x in (first == 0, first <= 1, first <= 4))
    worst = {spec.name: [float(bf16_vector_ulps(got.layers[l][c], ref.layers[l][c]).max()) for l in range(got.n_layers)]
             for c, spec in enumerate(got.specs)}
    return {"ulp_eq": eq, "ulp_le1": le1, "ulp_le4": le4, "ulp_eq_l0": eq0, "ulp_le1_l0": le10, "ulp_le4_l0": le40,
            "ulp_max_element": float(every.max()), "ulp_max_element_l0": float(first.max()),
            "ulp_max": max(max(v) for v in worst.values()), "ulp_max_l0": max(v[0] for v in worst.values()),
            "ulp_max_by_layer": json.dumps(worst, sort_keys=True)}


def answer(logits: torch.Tensor, ref: torch.Tensor, gold: int, is_ref: bool) -> dict:
    """An arm's answer measures: KL to re-prefill, argmax kept, the multiple-choice prediction."""
    pred = int(torch.argmax(logits[list(CHOICES)]))
    return {"kl": 0.0 if is_ref else kl(ref, logits), "recovered": bool(torch.argmax(logits) == torch.argmax(ref)),
            "pred": pred, "gold": gold, "correct": pred == gold, "n_choices": len(CHOICES)}


def served_spans(session, item: dict) -> tuple[tuple[list[int], ...], list, list]:
    """The item's spans (prefix, A, B, query) as the served model takes them, its images and B's images (the module
    docstring: a text model takes the drawn ids; an M-RoPE model gets an image in A and one at the head of B)."""
    spans = tuple(item[r] for r in ("prefix", "A", "B", "query"))
    if not mrope(session.config):
        return spans, [], []
    cfg = session.config
    marks = [int(cfg.vision_start_token_id), int(cfg.image_token_id), int(cfg.vision_end_token_id)]
    k = 2 * (1000 * item["seed"] + int(item["item_id"].lstrip("r")))
    a_img, b_img = image(k, (100, 90)), image(k + 1, (60, 120))
    p, a, b, q = spans
    half = len(a) // 2
    a = session.expand(a[:half] + marks + a[half:], [a_img])
    b = session.expand(marks + b, [b_img])
    return (p, a, b, q), [a_img, b_img], [b_img]


def engine_item(session, item: dict, arms: dict[str, dict | None]) -> tuple[dict[str, dict], dict]:
    """One item through vLLM: each arm's measures (label → :func:`answer`, :func:`ulp_stats`, ``seconds``) and one
    timing record. ``arms`` maps a label to how B is served: None for the re-prefill (no splice), else the segment's
    knobs (``{}``: R(δ) only; ``{"rotate": False}``: not re-rotated; ``{"rank": m}``: patched at rank m,
    None = full)."""
    i = item["item_id"]
    (p, a, b, query), images, b_images = served_spans(session, item)
    full = p + a + b + query
    pa, pb = len(p) + len(a), len(p) + len(a) + len(b)
    ref = session.run(full, {"capture": f"{i}.full"}, images=images)
    session.run(p + b, {"capture": f"{i}.canon"}, images=b_images)
    full_page, _ = session.page(f"{i}.full")
    canon, _ = session.page(f"{i}.canon")
    conditioned = full_page.slice(pa, pb)
    delta = int(full_page.positions[..., pa].reshape(-1)[0] - canon.positions[..., len(p)].reshape(-1)[0])
    patch = Patch.form(
        deficit(conditioned, relocate(canon.slice(len(p), len(p) + len(b)), delta)), dtype=conditioned.dtype
    )
    save_patch(session.store, f"{i}.patch", patch, session.model)
    reference = ref.logprobs.float()
    out = {}
    for label, how in arms.items():
        if how is None:
            out[label] = {
                **answer(reference, reference, item["gold"], True),
                "seconds": ref.seconds,
                **ulp_stats(conditioned, conditioned),
            }
            continue
        seg = {"key": f"{i}.canon", "span": [len(p), len(p) + len(b)], "start": pa}
        seg |= {"rotate": False} if how.get("rotate") is False else {}
        seg |= {"patch": f"{i}.patch", "rank": how["rank"]} if "rank" in how else {}
        got = session.run(
            full,
            {
                "capture": f"{i}.{label}",
                "tag": f"{i}.{label}",
                "segments": [{"key": f"{i}.full", "span": [0, pa]}, seg],
            },
            images=images,
        )
        written, _ = session.page(f"{i}.{label}")
        out[label] = {
            **answer(got.logprobs.float(), reference, item["gold"], False),
            "seconds": got.seconds,
            **ulp_stats(written.slice(pa, pb), conditioned),
        }
    # timing without captures: vLLM's prefill of the prompt vs the query after a rank-64 splice
    prefill = session.run(full, images=images)
    seg = {
        "key": f"{i}.canon",
        "span": [len(p), len(p) + len(b)],
        "start": pa,
        "patch": f"{i}.patch",
        "rank": TIMING_RANK,
    }
    spliced = session.run(
        full, {"tag": f"{i}.timing", "segments": [{"key": f"{i}.full", "span": [0, pa]}, seg]}, images=images
    )
    rec = next(r for r in reversed(session.timings()) if r["tag"] == f"{i}.timing")
    timing = {
        "prompt_tokens": len(full),
        "claimed_tokens": rec["tokens"],
        "spliced_tokens": len(b),
        "ttft_prefill_s": prefill.seconds,
        "ttft_splice_s": spliced.seconds,
        "compose_s": rec["compose_s"],
        "write_s": rec["write_s"],
        "delta": delta,
    }
    return out, timing
