"""Stand-in for torchvision.transforms.v2 (scripts/sglang_cpu)."""

from torchvision._standin import missing
from torchvision.transforms.v2 import functional  # noqa: F401

__getattr__ = missing("torchvision.transforms.v2")
