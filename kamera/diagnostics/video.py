"""Fig. 4(b): does a cheap content-change signal predict where the deficit lands on video frames?

Per visual token of B's frames, the deficit ‖Δ_i‖ (√ of Σ over layers and channels of ‖Δ_i‖²,
:func:`kamera.arms.oracle_topp.deficit_scores`) beside four signals measured against the previous
frame (the frame before it in B; for B's first frame, the last frame of the span before B, when that
span has one; a frame with no previous frame is left out):

    motion            mean optical-flow magnitude over the token's cell (OpenCV Farneback)
    warp_residual     mean |frame − previous frame warped by that flow| over the cell
    frame_similarity  1 − mean |frame − previous frame| over the cell (1 = unchanged, no warp)
    embed_diff        ‖e_i − e'_i‖ of the vision features the language model receives at the same cell

Tokens ↔ frame regions. A merged visual token covers one cell of a gh × gw grid laid over the whole
frame, in raster order. M-RoPE families (Qwen-VL) give each visual token its (h, w) coordinate, so
the grid is read from B's positions exactly. 1-D RoPE families do not; there the grid is the
factorisation gh · gw = n_visual whose aspect is closest to the frame's, exact for processors that
resize the whole frame (Kimi's, Qwen's) and for centre-cropping ones (CLIP/LLaVA) on square frames.
Frames are converted to grey levels in [0, 1] and resized to (gw · cell_px) × (gh · cell_px) pixels,
so every cell is a cell_px × cell_px block; the flow runs from each frame to its previous one
(backward), so the warp ``prev(x + flow(x))`` predicts the frame pixel for pixel.

Spearman correlations are read from the token records by :func:`signal_spearman` (per item, or
pooled over items, as the renderer chooses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from kamera.arms.oracle_topp import deficit_scores
from kamera.diagnostics.records import DELTA, SIGNALS
from kamera.models.base import Adapter, EncodedSpan
from kamera.reuse.context import ReuseContext

# Farneback parameters of OpenCV's dense optical-flow tutorial (pyramid 0.5 × 3 levels, 15-px window)
FLOW = dict(pyr_scale=0.5, levels=3, winsize=15, iterations=3, poly_n=5, poly_sigma=1.2, flags=0)


class NoFramePairs(ValueError):
    """The item has no (frame, previous frame) pair the signals can be measured on: B has no image, no
    frame of B has a predecessor, a frame and its predecessor differ in token grid, or frames are not
    separated by text. A property of the item, not a bug: a probe skips such items."""


@dataclass
class Frame:
    """One image of a span: its picture, its visual tokens (span-local, [n]) and their cell (row, col)."""

    image: Image.Image
    tokens: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor

    @property
    def grid(self) -> tuple[int, int]:
        return int(self.rows.max()) + 1, int(self.cols.max()) + 1

    def by_cell(self) -> torch.Tensor:
        """The tokens reordered to raster order of their cells, [gh · gw]."""
        return self.tokens[torch.argsort(self.rows * self.grid[1] + self.cols)]


def factor_grid(n: int, width: int, height: int) -> tuple[int, int]:
    """(gh, gw) with gh · gw = n whose aspect gw / gh is closest to width / height (fewer rows on ties)."""
    if n < 1 or width < 1 or height < 1:
        raise ValueError(f"a token grid needs n, width and height ≥ 1, got {n}, {width}, {height}")
    target = math.log(width / height)
    pairs = [(h, n // h) for h in range(1, n + 1) if n % h == 0]
    return min(pairs, key=lambda p: abs(math.log(p[1] / p[0]) - target))


def span_frames(adapter: Adapter, span: EncodedSpan) -> list[Frame]:
    """The span's images, each with its visual tokens and their grid cells (see the module docstring)."""
    images = [p for p in span.span.parts if isinstance(p, Image.Image)]
    vis = torch.nonzero(span.visual).flatten().cpu()
    runs = torch.tensor_split(vis, (torch.nonzero(vis.diff() > 1).flatten() + 1).tolist()) if vis.numel() else []
    if len(runs) != len(images):
        raise NoFramePairs(
            f"span {span.role!r} has {len(images)} images but {len(runs)} runs of visual tokens; "
            "frames must be separated by at least one text token"
        )
    frames = []
    for image, tokens in zip(images, runs, strict=True):
        n = int(tokens.numel())
        if adapter.position_rows == 3:
            pos = span.local_pos[:, tokens].cpu()
            rows, cols = pos[1] - pos[1].min(), pos[2] - pos[2].min()
            if int(rows.max() + 1) * int(cols.max() + 1) != n:
                raise ValueError(f"the M-RoPE (h, w) positions of a {n}-token image do not form a full grid")
        else:
            _, gw = factor_grid(n, *image.size)
            rows, cols = torch.arange(n) // gw, torch.arange(n) % gw
        frames.append(Frame(image, tokens, rows, cols))
    return frames


def cell_means(x: np.ndarray, gh: int, gw: int) -> np.ndarray:
    """[gh · cell, gw · cell] → [gh · gw] block means, raster order."""
    cell = x.shape[0] // gh
    return x.reshape(gh, cell, gw, cell).mean(axis=(1, 3)).reshape(-1)


def grey(image: Image.Image, size: tuple[int, int]) -> np.ndarray:
    """The image as float32 grey levels in [0, 1] at ``size`` (width, height)."""
    return np.asarray(image.convert("L").resize(size, Image.Resampling.BILINEAR), dtype=np.float32) / 255.0


def pixel_signals(frame: Image.Image, prev: Image.Image, gh: int, gw: int, cell_px: int = 16) -> dict[str, np.ndarray]:
    """Per cell of a gh × gw grid (raster order): motion, warp_residual, frame_similarity; each [gh · gw]."""
    import cv2  # opencv-python-headless, a dependency; imported here so the package loads without it

    size = (gw * cell_px, gh * cell_px)
    cur, before = grey(frame, size), grey(prev, size)
    flow = cv2.calcOpticalFlowFarneback((cur * 255).astype(np.uint8), (before * 255).astype(np.uint8), None, **FLOW)
    ys, xs = np.mgrid[0 : size[1], 0 : size[0]].astype(np.float32)
    warped = cv2.remap(before, xs + flow[..., 0], ys + flow[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return {
        "motion": cell_means(np.linalg.norm(flow, axis=-1), gh, gw),
        "warp_residual": cell_means(np.abs(cur - warped), gh, gw),
        "frame_similarity": 1.0 - cell_means(np.abs(cur - before), gh, gw),
    }


def check_cell_px(cell_px: int) -> None:
    """A cell side in pixels: an int ≥ 4 (Farneback needs a few pixels per cell)."""
    if isinstance(cell_px, bool) or not isinstance(cell_px, int) or cell_px < 4:
        raise ValueError(f"cell_px must be an int ≥ 4, got {cell_px!r}")


def token_signals(ctx: ReuseContext, cell_px: int = 16) -> list[dict]:
    """Per visual token of B with a previous frame: ‖Δ_i‖ and the four signals.

    Records: ``{token, frame, row, col, quantity, value}``; ``token`` is B-local, ``frame`` the image's
    index in B, (row, col) its cell; quantity ``"delta_norm"`` or one of :data:`SIGNALS`."""
    check_cell_px(cell_px)
    b = ctx.enc.spans[ctx.b]
    frames = span_frames(ctx.adapter, b)
    if not frames:
        raise NoFramePairs("B has no images: the video signals need frames")
    before = span_frames(ctx.adapter, ctx.enc.spans[ctx.b - 1]) if ctx.b > 0 else []
    pairs = [(0, frames[0], before[-1], ctx.enc.spans[ctx.b - 1])] if before else []
    pairs += [(i, frames[i], frames[i - 1], b) for i in range(1, len(frames))]
    if not pairs:
        raise NoFramePairs("no frame of B has a previous frame (B has one image and the span before it none)")
    delta = deficit_scores(ctx).sqrt().cpu()
    out = []
    for index, cur, prev, prev_span in pairs:
        if cur.grid != prev.grid:
            raise NoFramePairs(f"frame {index} of B has a {cur.grid} token grid but its previous frame {prev.grid}")
        gh, gw = cur.grid
        signals = pixel_signals(cur.image, prev.image, gh, gw, cell_px)
        tokens = cur.by_cell()
        e_cur = b.embeds[tokens.to(b.embeds.device)].float()
        e_prev = prev_span.embeds[prev.by_cell().to(prev_span.embeds.device)].float()
        signals["embed_diff"] = (e_cur - e_prev).norm(dim=-1).cpu().numpy()
        for cell, t in enumerate(tokens.tolist()):
            base = {"token": t, "frame": index, "row": cell // gw, "col": cell % gw}
            out.append({**base, "quantity": DELTA, "value": float(delta[t])})
            out.extend({**base, "quantity": q, "value": float(signals[q][cell])} for q in SIGNALS)
    return out


