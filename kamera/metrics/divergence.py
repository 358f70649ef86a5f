"""Per-item measures of how far an arm's next-token distribution is from re-prefill (EXPERIMENTS.md).

KL is computed from float32 logits over the full vocabulary at the first answer position. η is the share of
the blind → re-prefill gap an arm closes, counted only where blind reuse measurably loses (KL_blind
above a floor). Flip / recover compare argmaxes, over the choice letters for multiple choice.
Non-finite inputs (NaN or ±inf logits, a NaN KL) raise :class:`NonFiniteError`, an
:class:`~kamera.errors.ItemError`: the item is recorded as failed, never scored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kamera.core.precision import widen
from kamera.errors import ItemError

ETA_FLOOR = 1e-4


class NonFiniteError(ItemError):
    """A metric was handed NaN or ±inf (logits, or a KL); the message names what was compared."""


def _check_logits(name: str, logits: torch.Tensor, what: str) -> None:
    bad = ~torch.isfinite(logits)
    if bool(bad.any()):
        n_nan, n_pos = int(torch.isnan(logits).sum()), int((logits == math.inf).sum())
        n_neg = int(bad.sum()) - n_nan - n_pos
        raise NonFiniteError(
            f"KL({what}): the {name} logits hold {n_nan} NaN, {n_pos} +inf and {n_neg} -inf "
            f"of {logits.numel()} entries; a forward produced non-finite values"
        )


def kl(p_logits: torch.Tensor, q_logits: torch.Tensor, *, what: str = "p ‖ q") -> float:
    """KL(p ‖ q) over the full vocabulary (p = reference, usually re-prefill).

    Logits are read in float32 (never bf16; float64 logits as they are); the sum itself runs in float64, which
    removes the ~1e-8 rounding floor a float32 sum leaves, so exact identities show as KL ≈ 0. ``what`` names
    the comparison and the item for the error raised on NaN or ±inf logits (e.g.
    ``"re-prefill ‖ patch_r16, item mmniah-0042"``); a −inf logit is refused too, since a
    forward's raw logits are finite and a masked vocabulary would make the KL undefined.
    """
    if p_logits.shape != q_logits.shape:
        raise ValueError(f"logit shapes differ: {tuple(p_logits.shape)} vs {tuple(q_logits.shape)}")
    p, q = widen(p_logits), widen(q_logits)
    _check_logits("first (p)", p, what)
    _check_logits("second (q)", q, what)
    lp = torch.log_softmax(p.double(), dim=-1)
    lq = torch.log_softmax(q.double(), dim=-1)
    return max(0.0, float((lp.exp() * (lp - lq)).sum()))


def eta(kl_arm: float, kl_blind: float, floor: float = ETA_FLOOR, *, what: str = "η") -> float:
    """η = 1 − KL_arm / KL_blind, or NaN where the deficit is not measurable (KL_blind ≤ floor).

    The same ratio against loss-KL (re-prefill vs the 4D-mask oracle) gives gap@m. A non-finite
    KL raises :class:`NonFiniteError` naming ``what`` (NaN would otherwise read as "not measurable",
    and +inf as η = −inf or 1).
    """
    for name, value in (("KL_arm", kl_arm), ("KL_blind", kl_blind)):
        if not math.isfinite(value):
            raise NonFiniteError(f"{what}: {name} is {value}; η needs finite KLs")
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


SAFE_MARGIN = 0.1  # a stored patch is safe to reuse when its η is within this of the recomputed (exact) patch's


def transfer_safe(eta_transfer: float, eta_exact: float, margin: float = SAFE_MARGIN) -> bool:
    """Whether reusing a stored patch behind a changed antecedent loses nothing that matters: its η is within
    ``margin`` of the η of the patch recomputed on the new antecedent (App. D: "indistinguishable from
    recomputing the patch")."""
    return eta_transfer >= eta_exact - margin


def reuse_gate(divergence: Sequence[float], safe: Sequence[bool], coverage: float) -> dict:
    """App. D's reuse-vs-rebuild gate "reuse the stored patch iff divergence ≤ t", t set to reuse ``coverage`` of
    the cases (the ⌈coverage·n⌉ least divergent, ties at t reused too): the threshold, the share reused and the
    false-reuse rate, the share of the reused cases that were not :func:`transfer_safe` (NaN when none is
    reused). App. D: "as a binary reuse-vs-rebuild gate the cheap divergence signal is too weak (false-reuse
    24–47% at any useful coverage)"."""
    if len(divergence) != len(safe) or not divergence:
        raise ValueError(f"the gate needs one safe flag per divergence, got {len(divergence)} and {len(safe)}")
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must be in (0, 1], got {coverage}")
    t = sorted(divergence)[math.ceil(coverage * len(divergence)) - 1]
    reused = [s for d, s in zip(divergence, safe, strict=True) if d <= t]
    return {"threshold": t, "reused": len(reused) / len(divergence),
            "false_reuse": sum(not s for s in reused) / len(reused) if reused else math.nan}
