"""One printed identity check, shared by the engine's (:mod:`kamera.engine.verify`) and the real tier's
(:mod:`kamera.real.identities`) lists: what it compares, the measured value, its bound, and whether it holds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    """One identity: ``bound`` is a number (printed as ``bound 1e-05``) or a phrase (``identical``, ``—``)."""

    name: str
    value: float
    bound: float | str
    ok: bool

    def line(self) -> str:
        bound = self.bound if isinstance(self.bound, str) else f"bound {self.bound:.3g}"
        return f"{'PASS' if self.ok else 'FAIL'}  {self.name:<44} {self.value:<11.4g} {bound}"
