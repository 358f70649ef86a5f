"""The policy interface: how a cache builds the KV of each step's window, one small dataclass per policy.

A policy sees each step's window (chunk ids, in the order the agent asks for them) through its
:class:`~kamera.agent.session.Session` and returns the KV of every chunk of the window, built with the
session's counted primitives (prefill runs, canonicals, patches, moves by R(δ)); the replay runs the query on it.
``order`` may place the window's set in another order (placement); by default the window's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kamera.agent.session import Session
from kamera.agent.trace import Trace
from kamera.core import ChunkKV
from kamera.reuse.plugin import Plugin, Registry, UnknownNameError
from kamera.window.context import WindowView


class UnknownPolicyError(UnknownNameError):
    """A policy name no module registered."""


@dataclass
class Policy(Plugin):
    """Base class; subclasses are dataclasses whose fields are the policy's knobs. ``version`` is its code version,
    stamped on every row it makes (bump it when a change changes a stored number)."""

    version: ClassVar[int] = 1

    def problems(self, window: int | None = None, steps: int | None = None) -> list[str]:
        """What is wrong with this policy for a job's trace of ``steps`` windows of ``window`` chunks (None: not known
        before the pools are built), one line each, before any weights load."""
        return []

    def begin(self, s: Session, trace: Trace) -> None:
        """Called once before the trace's first step (a policy that plans over the whole known trace does it here)."""

    def order(self, s: Session, window: tuple[int, ...]) -> tuple[int, ...]:
        """The order the window's chunks are placed in (default: the agent's)."""
        return tuple(window)

    def build(self, s: Session, view: WindowView, order: tuple[int, ...]) -> list[ChunkKV] | None:
        """The KV of every chunk of ``order`` at its slot in ``view`` (None: the view's re-prefill is the answer)."""
        raise NotImplementedError


POLICY_REGISTRY: Registry[Policy] = Registry("policy", UnknownPolicyError)
POLICIES = POLICY_REGISTRY.entries
register = POLICY_REGISTRY.register
make_policy = POLICY_REGISTRY.make
