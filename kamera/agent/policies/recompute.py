"""``recompute``: re-prefill the whole window every step (the reference every other policy is measured against)."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.agent.policies.base import Policy, register
from kamera.agent.session import Session
from kamera.window.context import WindowView


@register
@dataclass
class Recompute(Policy):
    """Every chunk of the window prefilled in one forward with the query: the step's re-prefill, read as is."""

    name = "recompute"

    def build(self, s: Session, view: WindowView, order: tuple[int, ...]) -> None:
        s.reprefill(view, order)
        return None
