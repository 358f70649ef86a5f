"""Matched KV-byte budgets: a patch rank expressed as the token (or low-rank-K) budget of equal bytes.

Table 6 compares the patch with token-axis methods at equal bytes. A rank-m patch stores, on every
patched layer and channel c of width w_c, ``min(m, n_B, w_c) · (n_B + w_c)`` numbers; a recomputed
token costs one token-row of B's page, ``Σ_c w_c`` numbers on every layer. So at equal bytes

    tokens(m) = ⌊ Σ_{ℓ patched} Σ_c min(m, n_B, w_c)(n_B + w_c)  /  (n_layers · Σ_c w_c) ⌋

rounded down so a token arm never gets more bytes than the patch. On Qwen2.5-VL (K and V of width
512, all 28 layers) with n_B = 480 this is 31 tokens at rank 16 and 124 at rank 64, the figures of
Table 6 (see ``tests/arms``). A low-rank-K reconstruction (ShadowKV-style) stores ``r · (n_B + w_K)``
numbers per layer for K alone, so its matched rank is ``⌊ patch numbers / (n_layers · (n_B + w_K)) ⌋``.

The patch matched is the one the ``patch`` arm applies at rank m: m on content channels and the
family's rotary rank on the rotary ones (:func:`~kamera.core.default_rotary_rank`: m on GQA / MHA,
⌈m/4⌉ on MLA's k_pe), so on MLA a token arm's budget is not inflated by k_pe bytes the patch does not
store (:func:`channel_ranks`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kamera.core import default_rotary_rank
from kamera.reuse.context import ReuseContext


def _check(rank: int, n_b: int) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a non-negative int, got {rank!r}")
    if n_b <= 0:
        raise ValueError(f"n_B must be positive, got {n_b}")


def patch_numbers(rank: int | Sequence[int], n_b: int, widths: Sequence[int]) -> int:
    """Numbers a patch stores on one layer: Σ_c min(m_c, n_B, w_c)·(n_B + w_c), with one rank m for every
    channel or one rank per channel."""
    ranks = [rank] * len(widths) if isinstance(rank, int) else list(rank)
    if len(ranks) != len(widths):
        raise ValueError(f"{len(ranks)} ranks for {len(widths)} channels")
    for r in ranks:
        _check(r, n_b)
    return sum(min(r, n_b, w) * (n_b + w) for r, w in zip(ranks, widths, strict=True))


def matched_tokens(rank: int | Sequence[int], n_b: int, widths: Sequence[int], patched_layers: int | None = None,
                   n_layers: int = 1) -> int:
    """Tokens whose recompute costs at most the bytes of a rank-m patch (per-layer-channel SVD).

    ``widths`` are the page's channel widths (GQA/MHA: K and V, kv_heads·head_dim each; MLA: c_KV and
    k_pe). ``patched_layers`` of ``n_layers`` carry the patch (default all)."""
    patched = n_layers if patched_layers is None else patched_layers
    if not 0 <= patched <= n_layers:
        raise ValueError(f"patched_layers must lie in [0, {n_layers}], got {patched}")
    return min(n_b, patched * patch_numbers(rank, n_b, widths) // (n_layers * sum(widths)))


def matched_k_rank(rank: int | Sequence[int], n_b: int, widths: Sequence[int], k_width: int) -> int:
    """The rank of a K-only low-rank reconstruction that costs at most the bytes of a rank-m patch."""
    return patch_numbers(rank, n_b, widths) // (n_b + k_width)


def widths(ctx: ReuseContext) -> list[int]:
    """The channel widths of the model's page (heads · dim per channel)."""
    return [s.width for s in ctx.adapter.specs]


def channel_ranks(ctx: ReuseContext, rank: int) -> list[int]:
    """The per-channel ranks of the ``patch`` arm at rank m: m on content channels, the family's rotary rank
    on rotary ones."""
    _check(rank, ctx.n_b)
    rotary = default_rotary_rank(rank, ctx.adapter.attention)
    return [rank if s.rotary is None else rotary for s in ctx.adapter.specs]


def tokens_for(ctx: ReuseContext, rank: int) -> int:
    """Matched token budget of the ``patch`` arm's rank-m patch (all layers, per layer-channel) for this item's B."""
    return matched_tokens(channel_ranks(ctx, rank), ctx.n_b, widths(ctx), n_layers=ctx.adapter.n_layers)


def cell_bytes(ctx: ReuseContext) -> int:
    """Bytes of one token-row of B's page at one layer (a recomputed token costs n_layers cells)."""
    return ctx.page_bytes() // (ctx.n_b * ctx.adapter.n_layers)
