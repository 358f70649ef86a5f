"""What the diagnostics share: channel roles, relative norms, argument checks.

Every diagnostic returns plain records (a list of dicts with a fixed key set per function, ``None``
where a key does not apply), long format, so a probe can store them beside the rows and a renderer
can pivot them. Item keys (model, item_id, …) are not added here: whoever stores the records does.
"""

from __future__ import annotations

import torch

from kamera.core import ChannelSpec


def role(spec: ChannelSpec) -> str:
    """"rotary" for a channel RoPE rotates (K, MLA k_pe), "content" otherwise (V, MLA latent c_KV)."""
    return "content" if spec.rotary is None else "rotary"


def frobenius(x: torch.Tensor) -> float:
    """‖x‖_F in float64."""
    return float(x.double().norm())


def relative(num: float, den: float) -> float:
    """num / den, 0 when both are 0 and inf when only den is (never a division error)."""
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den
