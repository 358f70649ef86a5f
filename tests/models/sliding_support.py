"""What the sliding-window families' tests share (Gemma 3, Gemma-3n): the item, the per-layer error, a chunk's KV
prefilled alone, and the check that a query reads exactly the rows of B inside each sliding layer's window."""

from __future__ import annotations

import torch

from kamera.core import ChunkKV
from kamera.items.spans import Span
from kamera.reuse.context import ReuseContext

B_TEXT = "The board: the red cup is left, the blue cup is right, the green cup sits between them."


def spans(b_text: str = B_TEXT) -> list[Span]:
    return [
        Span("prefix", ("Answer with one letter.",)),
        Span("A", ("The key is under the red cup.",)),
        Span("A", ("The coin is under the blue cup.",)),
        Span("B", (b_text,)),
        Span("query", ("Which cup hides the key? A, B, C or D.",)),
    ]


def rel_err(a: ChunkKV, b: ChunkKV, channel: int, layers: list[int] | None = None) -> float:
    """The largest relative error of ``channel`` over the layers (all, or ``layers``)."""
    pairs = list(zip(a.layers, b.layers, strict=True))
    pairs = pairs if layers is None else [pairs[l] for l in layers]
    return max(float((x[channel].double() - y[channel].double()).norm() / y[channel].double().norm()) for x, y in pairs)


def alone(adapter, span: Span, start: int) -> ChunkKV:
    """``span``'s KV prefilled on its own at ``start``."""
    enc = adapter.encode_span(span)
    out = adapter.forward([(enc, start)])
    return adapter.read(out.cache, 0, enc.n_tokens, enc.local_pos + start)


def sliding_layers_of(adapter) -> list[int]:
    return [l for l in range(adapter.n_layers) if adapter.layer_window(l) is not None]


def assert_the_query_reads_only_rows_inside_the_window(twin, ctx: ReuseContext, read: float) -> None:
    """At a sliding layer, B's rows window − 1 or more slots behind the query are not read (corrupting them leaves
    the logits bit-identical); corrupting the rows inside the window, or any row at a global layer, moves the logits
    by more than ``read``. The spliced KV itself gives the re-prefill's logits."""
    b0, b1 = ctx.ranges[ctx.b]  # b1: the slots before the query
    out_of_window = torch.arange(ctx.n_b) < b1 - (twin.window - 1) - b0
    assert 0 < int(out_of_window.sum()) < ctx.n_b

    def corrupted(layers: list[int], rows: torch.Tensor) -> torch.Tensor:
        new = [tuple(t.clone() for t in chans) for chans in ctx.conditioned.layers]
        for l in layers:
            for t in new[l]:
                t[rows] += 3.0
        return ctx.query(ctx.conditioned.with_layers(new)).logits

    spliced = ctx.query(ctx.conditioned).logits
    torch.testing.assert_close(spliced, ctx.reprefill_logits, rtol=0, atol=1e-5)
    sliding = sliding_layers_of(twin)
    assert torch.equal(corrupted(sliding, out_of_window), spliced)
    assert float((corrupted(sliding, ~out_of_window) - spliced).abs().max()) > read
    globals_ = [l for l in range(twin.n_layers) if l not in sliding]
    assert float((corrupted(globals_, out_of_window) - spliced).abs().max()) > read
