"""Fig. 4(b): per-token ‖Δ‖ beside optical-flow motion, warp residual, frame similarity and
vision-embedding difference, on a synthetic clip (a bright square sliding right over a flat background)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from diag_support import SQUARE_ROWS, video_frame, video_spans

from kamera.arms.oracle_topp import deficit_scores
from kamera.diagnostics import signal_spearman, token_signals
from kamera.diagnostics.records import DELTA, SIGNALS, spearman
from kamera.diagnostics.video import factor_grid, pixel_signals, span_frames
from kamera.items.spans import Span
from kamera.reuse.context import ReuseContext

FAMILIES = ["tiny_qwen2_5_vl", "tiny_llava"]  # M-RoPE grid from positions; 1-D grid by factorisation


@pytest.fixture(scope="module")
def clips(tiny):
    """Per family: the context of [prefix, A(f0, f1), B(f2, f3, f3), query] and its token records."""
    out = {}
    for name in FAMILIES:
        ctx = ReuseContext(tiny(name), video_spans())
        out[name] = (ctx, pd.DataFrame(token_signals(ctx)))
    return out


@pytest.mark.parametrize("name", FAMILIES)
def test_every_visual_token_of_b_gets_delta_and_four_signals(clips, name):
    ctx, frame = clips[name]
    b = ctx.enc.spans[ctx.b]
    assert list(frame.columns) == ["token", "frame", "row", "col", "quantity", "value"]
    assert set(frame["quantity"]) == {DELTA, *SIGNALS}
    # B's first frame is compared with A's last, so every visual token of B is measured, once per quantity
    visual = torch.nonzero(b.visual).flatten().tolist()
    assert sorted(frame[frame["quantity"] == DELTA]["token"]) == visual
    assert frame.groupby("quantity").size().eq(len(visual)).all()
    assert set(frame["frame"]) == {0, 1, 2}
    grids = {(r, c) for r, c in zip(frame["row"], frame["col"], strict=True)}
    assert grids == {(r, c) for r in range(4) for c in range(4)}
    delta = deficit_scores(ctx).sqrt()
    d = frame[frame["quantity"] == DELTA]
    assert all(v == pytest.approx(float(delta[t])) for t, v in zip(d["token"], d["value"], strict=True))


@pytest.mark.parametrize("name", FAMILIES)
def test_a_repeated_frame_shows_no_change_and_a_moving_square_moves(clips, name):
    _, frame = clips[name]
    wide = frame.pivot_table(index=["frame", "row", "col"], columns="quantity", values="value")
    repeat = wide.loc[2]  # f3 after f3
    assert repeat["motion"].abs().max() <= 1e-3 and repeat["warp_residual"].max() <= 1e-3
    assert (repeat["frame_similarity"] == 1.0).all() and (repeat["embed_diff"] == 0.0).all()
    moved = wide.loc[1]  # f3 after f2: the square sits in pixel rows 40-72 of 112, grid rows 1-2 of 4
    rows = {int(r) for r in moved.index.get_level_values("row")[moved["motion"] > 0.5 * moved["motion"].max()]}
    assert rows <= {SQUARE_ROWS[0] * 4 // 112, (SQUARE_ROWS[1] - 1) * 4 // 112}
    assert moved["frame_similarity"].min() < 1.0 and moved["embed_diff"].max() > 0.0
    # motion compensation explains the move: the warp residual is far below the raw frame difference
    assert moved["warp_residual"].max() < 0.5 * (1 - moved["frame_similarity"]).max()


def test_pixel_signals_of_a_shift():
    sig = pixel_signals(video_frame(1), video_frame(0), 4, 4)
    assert {k: v.shape for k, v in sig.items()} == {k: (16,) for k in ("motion", "warp_residual", "frame_similarity")}
    motion = sig["motion"].reshape(4, 4)
    # the square (grid rows 1-2) moves ~6 px at the 64-px working size; the flat top row barely moves
    assert float(motion.max()) > 3.0 and int(motion.max(1).argmax()) in (1, 2)
    assert float(motion[0].max()) < 0.25 * float(motion.max())


def test_factor_grid_and_frames():
    assert factor_grid(16, 112, 112) == (4, 4)
    assert factor_grid(32, 224, 112) == (4, 8)
    assert factor_grid(7, 10, 10) == (1, 7)
    with pytest.raises(ValueError, match="grid"):
        factor_grid(0, 10, 10)


def test_adjacent_images_without_a_separator_are_refused(tiny):
    adapter = tiny("tiny_llava")  # LLaVA puts no marker around an image: back-to-back frames merge
    span = adapter.encode_span(Span("B", (video_frame(0), video_frame(1))))
    with pytest.raises(ValueError, match="separated"):
        span_frames(adapter, span)


def test_token_signals_need_frames_with_a_predecessor(tiny):
    adapter = tiny("tiny_qwen2_5_vl")
    text_a = [Span("prefix", ("Watch.",)), Span("A", ("before",)), Span("B", ("f", video_frame(0))),
              Span("query", ("Where? Answer:",))]
    with pytest.raises(ValueError, match="previous frame"):
        token_signals(ReuseContext(adapter, text_a))
    no_image = [Span("prefix", ("Watch.",)), Span("B", ("no frames here",)), Span("query", ("Where? Answer:",))]
    with pytest.raises(ValueError, match="no images"):
        token_signals(ReuseContext(adapter, no_image))
    with pytest.raises(ValueError, match="cell_px"):
        token_signals(ReuseContext(adapter, video_spans()), cell_px=2)


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)  # ties take average ranks
    assert math.isnan(spearman([1, 2, 3], [7, 7, 7])) and math.isnan(spearman([1], [2]))
    with pytest.raises(ValueError, match="equal lengths"):
        spearman([1, 2], [1, 2, 3])


def test_signal_spearman_per_item_and_pooled(clips):
    ctx, frame = clips["tiny_qwen2_5_vl"]
    records = frame.to_dict("records")
    own = signal_spearman(records)
    assert [r["signal"] for r in own] == list(SIGNALS)
    assert all(r["n_tokens"] == int(ctx.enc.spans[ctx.b].visual.sum()) for r in own)
    wide = frame.pivot(index="token", columns="quantity", values="value")
    assert own[0]["value"] == pytest.approx(spearman(wide[DELTA], wide["motion"]))
    two = [{**r, "item_id": i} for i in ("x", "y") for r in records]
    per_item = signal_spearman(two, by=["item_id"])
    assert [(r["item_id"], r["value"]) for r in per_item[:4]] == [("x", r["value"]) for r in own]
    pooled = signal_spearman(two)  # the item key keeps the two items' tokens apart
    assert all(r["n_tokens"] == 2 * own[0]["n_tokens"] for r in pooled)
    with pytest.raises(ValueError, match="item key"):
        signal_spearman(records + records)
    with pytest.raises(ValueError, match="keys"):
        signal_spearman([])
    with pytest.raises(ValueError, match="lack quantities"):
        signal_spearman([r for r in records if r["quantity"] != "embed_diff"])
