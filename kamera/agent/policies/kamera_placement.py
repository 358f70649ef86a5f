"""``kamera_placement``: ``kamera`` plus a placement scheduler: the window's contents as a set, placed in the order
that prefills the fewest tokens under the menu (reuse-aware placement, the paper's App. E open question).

Online greedy: slot by slot, the chunk of the set that costs the fewest tokens there given the chunks already
placed (what :meth:`~kamera.agent.policies.kamera.Kamera.action` would take: a formed chunk costs its tokens, a
leading chunk its canonical when the store lacks it, every reuse nothing), then the one whose KV would be exact,
then the chunk's slot in the previous placed window (so a re-examined set keeps its order), then the agent's order.

The agent's order may carry meaning (a toy scene binds only the states in front of it): rows measure ``kl``
against the re-prefill of the agent's order and ``kl_placed`` against the re-prefill of the placed order."""

from __future__ import annotations

from dataclasses import dataclass

from kamera.agent.policies.base import register
from kamera.agent.policies.kamera import Kamera
from kamera.agent.session import Session


@register
@dataclass
class KameraPlacement(Kamera):
    """The menu of ``kamera`` on a greedy, reuse-aware order of each window's set."""

    name = "kamera_placement"

    def order(self, s: Session, window: tuple[int, ...]) -> tuple[int, ...]:
        before = {c: j for j, c in enumerate(s.placed)}
        left, placed = list(window), []
        while left:
            ants = s.antecedents(tuple(placed), len(placed))

            def cost(c: int, ants: tuple[str, ...] = ants) -> tuple:
                tokens, approximate = self.tokens_at(s, len(placed), c, ants)
                return (tokens, approximate, before.get(c, len(window)), window.index(c))

            best = min(left, key=cost)
            placed.append(best)
            left.remove(best)
        return tuple(placed)
