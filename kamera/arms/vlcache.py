"""VLCache (Qin et al., arXiv 2512.12977) as Table 5 runs it: a uniform per-layer recompute budget (10%).

Source: the proof of concept ``Odysseusq/VLCache`` at 59b871d, nanovllm/engine/block_manager.py
``try_partial_recompute``: ``R = math.ceil(recompute_ratio * N)``, the first R image tokens are
recomputed together with all text around the image; the README's test uses ratio 0.1. The paper's
layer-adaptive schedule ("dynamic, layer-aware recomputation", which layers to recompute) is not
public (the production SGLang version ``ibifrost/VLCache`` is not available), so Table 5 uses a
uniform budget on every layer, as the preprint says ("understates its layer-adaptive schedule, a
conservative test"). Default ``ratio = 0.10``.

Choices where the source is ambiguous or the harness differs:
- The PoC serves one image; with several images in B each image recomputes its first
  ``ceil(ratio · N_i)`` tokens (the same uniform ratio per image).
- Its "text around the image" is the uncached prompt; here B's own text is cached with the image and
  ``text=True`` (default, as the PoC) recomputes it too. Budget 0 ≡ blind is
  ``ratio=0, text=False``; ``ratio=1, text=True`` recomputes all of B.
- The selected rows are recomputed at every layer (the PoC has no layer schedule).
- Text-only families are refused: there is no image to select from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kamera.arms.base import register
from kamera.arms.tokens import ImageTokenArm
from kamera.knobs import check_fraction


@register
@dataclass
class VLCacheArm(ImageTokenArm):
    name = "vlcache"
    ratio: float = 0.10

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fraction(self.name, "ratio", self.ratio)

    def per_image(self, n_image: int) -> int:
        return math.ceil(self.ratio * n_image - 1e-9)
