"""One request's splice plan, checked on both sides of the connector (no vLLM needed).

A request names :class:`Segment` s in ``kv_transfer_params["kamera"]["segments"]`` (:func:`segments`);
:func:`check_plan` refuses, in one line, a plan whose pages or patches are missing, belong to another model, hold
other tokens or other media than the prompt at their place, do not move rigidly onto the prompt's positions, or
leave no token to compute; :func:`compose` builds the claimed KV with kamera's operator. Positions are vLLM's:
0..n−1, or M-RoPE's [3, n] rows (``get_mrope_input_positions``), where a segment moves by one δ on every row
(:func:`segment_delta`). Media are keyed by their full content digest and the offset inside the medium
(:func:`media_of`, :func:`windows`), never by the placeholder ids, which are alike for every image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kamera.core import ChannelSpec, ChunkKV, concat, family_rank_view, relocate
from kamera.engine.family import EngineError
from kamera.engine.store import attention_of, load_page, load_patch, page_media

PARAMS = "kamera"  # the key of kv_transfer_params a kamera request uses


@dataclass(frozen=True)
class Segment:
    """Tokens ``[a, b)`` of page ``key`` placed at ``start`` (re-rotated unless ``rotate`` is False, patched if
    ``patch``)."""

    key: str
    a: int
    b: int
    start: int
    rotate: bool = True
    patch: str | None = None
    rank: int | None = None

    @property
    def n(self) -> int:
        return self.b - self.a


def segments(params: dict | None) -> list[Segment]:
    """The segments a request's ``kamera`` parameters name (empty for none), laid end to end from position 0."""
    spec = (params or {}).get(PARAMS) or {}
    out, at = [], 0
    for i, s in enumerate(spec.get("segments") or []):
        unknown = set(s) - {"key", "span", "start", "rotate", "patch", "rank"}
        if unknown or "key" not in s or "span" not in s:
            raise EngineError(
                f"segment {i} needs key and span (and may give start, rotate, patch, rank), got {sorted(s)}"
            )
        a, b = (int(x) for x in s["span"])
        seg = Segment(
            str(s["key"]),
            a,
            b,
            int(s.get("start", at)),
            bool(s.get("rotate", True)),
            s.get("patch"),
            None if s.get("rank") is None else int(s["rank"]),
        )
        if not 0 <= a < b:
            raise EngineError(f"segment {i} has an empty or negative span [{a}, {b})")
        if seg.start != at:
            raise EngineError(f"segment {i} starts at {seg.start}; segments must tile the prompt from 0 (next is {at})")
        out.append(seg)
        at += seg.n
    return out


def matched_chunks(chunks: list, prompt: list[int] | torch.Tensor, store: Path, model: str,
                   specs: tuple[ChannelSpec, ...]) -> list[Segment]:
    """The segments a position-free request's ``chunks`` give: the prompt tiled from position 0 by whole stored
    pages, each found by its tokens wherever it now sits (δ follows from the place found, never from the request).

    ``chunks``: page keys, or ``{"key", "patch", "rank"}`` objects (the patch conditions that chunk where it is
    found). At each position the first listed page whose tokens equal the prompt's there is placed; the tiling stops
    where none does, or where a page would leave no prompt token to compute. A missing or foreign page is a
    StoreError, an unknown field an EngineError."""
    prompt = torch.as_tensor(list(prompt), dtype=torch.int64)
    listed = []
    for i, c in enumerate(chunks):
        c = {"key": c} if isinstance(c, str) else c
        if not isinstance(c, dict) or "key" not in c or set(c) - {"key", "patch", "rank"}:
            raise EngineError(f"chunk {i} must be a page key or {{key, patch, rank}}, got {c!r}")
        _, ids = load_page(store, str(c["key"]), model, specs)
        listed.append((c, ids))
    out, at = [], 0
    while True:
        fits = [(c, ids) for c, ids in listed
                if at + len(ids) < len(prompt) and torch.equal(ids, prompt[at : at + len(ids)])]
        if not fits:
            return out
        c, ids = fits[0]
        rank = c.get("rank")
        out.append(Segment(str(c["key"]), 0, len(ids), at, True, c.get("patch"), None if rank is None else int(rank)))
        at += len(ids)


def plan_segments(params: dict | None, prompt: list[int] | torch.Tensor, store: Path, model: str,
                  specs: tuple[ChannelSpec, ...]) -> list[Segment]:
    """A request's segments, named (``segments``, :func:`segments`) or found (``chunks``, :func:`matched_chunks`)."""
    spec = (params or {}).get(PARAMS) or {}
    if spec.get("segments") and spec.get("chunks"):
        raise EngineError("a request names segments or chunks, not both")
    if spec.get("chunks"):
        return matched_chunks(list(spec["chunks"]), prompt, store, model, specs)
    return segments(params)


def check_plan(
    segs: list[Segment],
    prompt: list[int] | torch.Tensor,
    store: Path,
    model: str,
    specs: tuple[ChannelSpec, ...],
    max_model_len: int,
    positions: torch.Tensor | None = None,
    media: list[dict] | None = None,
) -> int:
    """The number of tokens the plan claims, after checking every page and patch exists, is this model's and fits.

    Raises :class:`EngineError` / :class:`~kamera.engine.store.StoreError` for a missing chunk, another
    model's chunk, tokens that differ from the prompt's, or a claim that leaves no token to compute or runs
    past ``max_model_len``: a bad splice is refused, never silently recomputed. With the prompt's
    ``positions`` ([n] or M-RoPE's [3, n], as vLLM places them) each segment must move rigidly (one δ on every
    row and token, :func:`segment_delta`); with the prompt's ``media`` (:func:`media_of`) each segment's images
    must be the page's, by full content digest and offset (image placeholder ids alone are all alike).
    """
    prompt = torch.as_tensor(list(prompt), dtype=torch.int64)
    n = sum(s.n for s in segs)
    if len(prompt) > max_model_len:
        raise EngineError(f"prompt of {len(prompt)} tokens is past the engine's max_model_len {max_model_len}")
    if segs and n >= len(prompt):
        raise EngineError(
            f"the splice claims {n} of {len(prompt)} prompt tokens; at least the last one must be computed"
        )
    for s in segs:
        page, ids = load_page(store, s.key, model, specs)
        if s.b > page.n_tokens:
            raise EngineError(f"segment span [{s.a}, {s.b}) is past page {s.key!r} of {page.n_tokens} tokens")
        if not torch.equal(ids[s.a : s.b], prompt[s.start : s.start + s.n]):
            raise EngineError(f"page {s.key!r} tokens [{s.a}, {s.b}) differ from the prompt's tokens at {s.start}")
        if positions is not None:
            segment_delta(s, page.positions, positions)
        if media is not None:
            had, want = windows(page_media(store, s.key), s.a, s.b), windows(media, s.start, s.start + s.n)
            if had != want:
                raise EngineError(
                    f"page {s.key!r} tokens [{s.a}, {s.b}) hold media {had or 'none'}, the prompt's tokens "
                    f"at {s.start} {want or 'none'}"
                )
        if s.patch is not None:
            patch = load_patch(store, s.patch, model, specs)
            if patch.n_tokens != s.n:
                raise EngineError(f"patch {s.patch!r} covers {patch.n_tokens} tokens, the segment {s.n}")
    return n


def segment_delta(s: Segment, page_positions: torch.Tensor, positions: torch.Tensor) -> int:
    """δ that moves the segment's page positions onto the prompt's at its place: one number for every token and
    (M-RoPE) every row, else EngineError (R(δ) is a rotation by one δ; a chunk whose rows move apart is not it)."""
    had = page_positions[..., s.a : s.b].to(torch.int64)
    want = positions[..., s.start : s.start + s.n].to(torch.int64)
    if had.shape != want.shape:
        raise EngineError(f"page {s.key!r} positions have shape {tuple(had.shape)}, the prompt's {tuple(want.shape)}")
    delta = want - had
    if not torch.equal(delta, delta.reshape(-1)[:1].expand_as(delta)):
        raise EngineError(
            f"segment {s.key!r} [{s.a}, {s.b}) at {s.start} does not move rigidly: its position rows shift "
            f"by {sorted(set(delta.reshape(-1).tolist()))[:4]}…, R(δ) needs one δ"
        )
    return int(delta.reshape(-1)[0])


def media_of(features: list[Any] | None) -> list[dict]:
    """A request's media as the page metadata records them: modality, full content digest (vLLM's
    ``MultiModalFeatureSpec.identifier``, the hash its encoder cache is keyed by) and placeholder range; where
    the range's ``is_embed`` mask leaves some of its tokens out (vLLM's ``PlaceholderRange``: a non-contiguous
    run of embeddings), also ``embeds``, the [start, end) runs of prompt tokens that take the medium's embeddings.
    Placeholder token ids never identify a medium: they are alike for every image."""
    out = []
    for f in sorted(features or [], key=lambda f: f.mm_position.offset):
        digest = str(f.identifier)
        if len(digest) < 32:
            raise EngineError(
                f"{f.modality} digest {digest!r} is too short to key cached KV by (a full digest is needed)"
            )
        pos = f.mm_position
        medium = {"modality": f.modality, "digest": digest, "offset": int(pos.offset), "length": int(pos.length)}
        mask = getattr(pos, "is_embed", None)
        if mask is not None and not (mask := torch.as_tensor(mask, dtype=torch.bool)).all():
            medium["embeds"] = embed_runs(mask, int(pos.offset))
        out.append(medium)
    return out


def embed_runs(mask: torch.Tensor, offset: int) -> list[list[int]]:
    """The [start, end) runs where ``mask`` ([length] bool) is True, in prompt positions from ``offset``."""
    edges = torch.nn.functional.pad(mask.to(torch.int8), (1, 1)).diff()  # +1 where a run starts, −1 after it ends
    starts, ends = (edges == 1).nonzero().flatten(), (edges == -1).nonzero().flatten()
    return [[offset + int(a), offset + int(b)] for a, b in zip(starts, ends, strict=True)]


def windows(media: list[dict], a: int, b: int) -> list[tuple]:
    """The media inside tokens [a, b): (modality, digest, offset from a, offset inside the medium, tokens) each,
    and for a medium with ``embeds`` runs (:func:`media_of`) the runs inside [a, b), from a."""
    out = []
    for m in media:
        lo, hi = max(a, m["offset"]), min(b, m["offset"] + m["length"])
        if lo < hi:
            window = (m["modality"], m["digest"], lo - a, lo - m["offset"], hi - lo)
            if "embeds" in m:
                runs = [(max(lo, s) - a, min(hi, e) - a) for s, e in m["embeds"] if max(lo, s) < min(hi, e)]
                window += (tuple(runs),)
            out.append(window)
    return out


def compose(
    segs: list[Segment], store: Path, model: str, specs: tuple[ChannelSpec, ...], positions: torch.Tensor | None = None
) -> ChunkKV:
    """The claimed KV at the prompt's first n positions (``positions``: [n] or [3, n], default 0..n−1): each
    segment's page slice moved by R(δ) (or not), patched at its rank (MLA: k_pe at ⌈m/4⌉, kamera's rank rule,
    :func:`kamera.core.family_rank_view`)."""
    kind = attention_of(specs)
    parts = []
    for s in segs:
        page, _ = load_page(store, s.key, model, specs)
        part = page.slice(s.a, s.b)
        delta = s.start - int(part.positions[0]) if positions is None else segment_delta(s, page.positions, positions)
        if not s.rotate:
            parts.append(ChunkKV(specs, part.layers, part.positions + delta))
        elif s.patch is None:
            parts.append(relocate(part, delta))
        else:
            patch = load_patch(store, s.patch, model, specs)
            target = part.positions + delta
            if not torch.equal(patch.positions, target):
                patch = patch.relocate(int((target - patch.positions).reshape(-1)[0]))
            parts.append(family_rank_view(patch, s.rank, kind).apply(part, delta))
    return concat(parts)
