"""Stand-in for torchvision.io (scripts/sglang_cpu)."""

import enum

from torchvision._standin import missing


class ImageReadMode(enum.Enum):
    """torchvision's names, so transformers' image utilities import."""

    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


__getattr__ = missing("torchvision.io")
