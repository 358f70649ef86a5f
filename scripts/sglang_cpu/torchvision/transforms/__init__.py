"""Stand-in for torchvision.transforms: the enum SGLang's processors name at import, and the submodules."""

import enum

from torchvision._standin import missing
from torchvision.transforms import functional, v2  # noqa: F401


class InterpolationMode(enum.Enum):
    """torchvision's names and values, so a default argument built from one imports."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


__getattr__ = missing("torchvision.transforms")
