"""PRCR (Wang et al., arXiv 2606.26631): cache visual keys before rotation, re-assign positions, no patch.

Source: the paper (no public code found): Raw Visual Evidence Memory stores each layer's pre-RoPE K and V of the
visual tokens with their positions; at reuse RoPE is applied at the re-assigned positions and the values are reused
as they are, with no forward and no correction of the conditioning.

What it is here: with the positions B has in the window (its native positions), rotating the raw keys at them is
R(p + δ)·k_raw = R(δ)·R(p)·k_raw = R(δ)·KV(B|∅) (RoPE composes), which is blind reuse: this arm *is* ``blind``
(the same rows, bit for bit; ``tests/arms/test_new_baselines.py`` checks the algebra on raw keys and the alias). What
differs in PRCR is where it puts the tokens: its best re-assignment, Position-Constrained Rebinding, squeezes the
selected visual tokens' (h, w) coordinates into a left extension of L = 2 positions before the next text token
(fractional positions), for revisiting evidence mid-decoding; a chunk served at its place in the window keeps its
native positions, so that re-assignment is not run (stated in docs/baselines.md §8). Stores nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import register
from kamera.arms.blind import BlindArm


@register
@dataclass
class PrcrArm(BlindArm):
    name = "prcr"
