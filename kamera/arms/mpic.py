"""MPIC-k (Zhao, Hu, Huang, Zheng, Chen; arXiv 2502.01960): the first k tokens of each image, plus all text.

Source: MPIC §4.2 ("we select all text tokens and k tokens at the beginning of image tokens to be
recomputed"; Insight 2: the first image tokens act as attention sinks; Insight 3: they carry the
largest K distance). Headline setting MPIC-32 (default k = 32). No public code was found
(``docs/baselines.md`` §3); MPIC's "selective attention" recomputes the selected rows in
one pass, which we read as every layer, as EPIC does.

Choices where the source is ambiguous or the harness differs:
- k counts per image: each maximal run of visual tokens in B is one image
  (:func:`~kamera.arms.tokens.visual_runs`); an image shorter than k is recomputed whole.
- "All text" in MPIC is the uncached prompt. Here B's own text (captions, vision start/end markers)
  is cached with the image; ``text=True`` (default, as §4.2) recomputes it too. Budget 0 ≡ blind is
  ``k=0, text=False``; ``k ≥`` the largest image with ``text=True`` recomputes all of B.
- Text-only families are refused: there is no image to select from.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import register
from kamera.arms.tokens import ImageTokenArm
from kamera.knobs import check_count


@register
@dataclass
class MpicArm(ImageTokenArm):
    name = "mpic"
    k: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count(self.name, "k", self.k)

    def per_image(self, n_image: int) -> int:
        return self.k
