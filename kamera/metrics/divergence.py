"""Per-item measures of how far an arm's next-token distribution is from re-prefill (EXPERIMENTS.md).

KL is computed from float32 logits over the full vocabulary at the first answer position. η is the share of
the blind → re-prefill gap an arm closes, counted only where blind reuse measurably loses (KL_blind
above a floor). Flip / recover compare argmaxes, over the choice letters for multiple choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

ETA_FLOOR = 1e-4


def kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    """KL(p ‖ q) over the full vocabulary (p = reference, usually re-prefill).

    Logits are read in float32 (never bf16); the sum itself runs in float64, which removes the
    ~1e-8 rounding floor a float32 sum leaves, so exact identities show as KL ≈ 0.
    """
    if p_logits.shape != q_logits.shape:
        raise ValueError(f"logit shapes differ: {tuple(p_logits.shape)} vs {tuple(q_logits.shape)}")
    lp = torch.log_softmax(p_logits.float().double(), dim=-1)
    lq = torch.log_softmax(q_logits.float().double(), dim=-1)
    return max(0.0, float((lp.exp() * (lp - lq)).sum()))


def eta(kl_arm: float, kl_blind: float, floor: float = ETA_FLOOR) -> float:
    """η = 1 − KL_arm / KL_blind, or NaN where the deficit is not measurable (KL_blind ≤ floor).

    The same ratio against loss-KL (re-prefill vs the 4D-mask oracle) gives gap@m.
    """
    if not kl_blind > floor:
        return math.nan
    return 1.0 - kl_arm / kl_blind


def choice_argmax(logits: torch.Tensor, choice_ids: Sequence[int] | None = None) -> int:
    """Argmax token id, restricted to the choice-letter ids when given."""
    if choice_ids is None:
        return int(logits.argmax())
    ids = torch.as_tensor(list(choice_ids), device=logits.device)
    return int(ids[logits[ids].argmax()])


def flipped(blind_logits: torch.Tensor, ref_logits: torch.Tensor, choice_ids: Sequence[int] | None = None) -> bool:
    """Blind reuse changes the re-prefill decision."""
    return choice_argmax(blind_logits, choice_ids) != choice_argmax(ref_logits, choice_ids)


def recovered(arm_logits: torch.Tensor, ref_logits: torch.Tensor, choice_ids: Sequence[int] | None = None) -> bool:
    """The arm takes the re-prefill decision (read on the flipped items for flip-recover)."""
    return choice_argmax(arm_logits, choice_ids) == choice_argmax(ref_logits, choice_ids)


def flip_recover(flips: Sequence[bool], recovers: Sequence[bool]) -> float:
    """Over items where blind flipped the decision, the fraction the arm recovered (NaN if none flipped)."""
    if len(flips) != len(recovers):
        raise ValueError("flips and recovers must be paired per item")
    picked = [r for f, r in zip(flips, recovers, strict=True) if f]
    return math.nan if not picked else sum(picked) / len(picked)


def predicted_letter(logits: torch.Tensor, choice_ids: Sequence[int], letters: str) -> str:
    """The choice letter whose token the arm ranks highest."""
    if len(choice_ids) != len(letters):
        raise ValueError("one token id per choice letter")
    ids = list(choice_ids)
    return letters[ids.index(choice_argmax(logits, ids))]


def accuracy(correct: Sequence[bool | float]) -> float:
    """Mean of per-item correctness (NaN for no items)."""
    return math.nan if not correct else float(sum(correct)) / len(correct)
