"""Stand-in for torchvision.transforms.v2.functional (scripts/sglang_cpu)."""

from torchvision._standin import missing

__getattr__ = missing("torchvision.transforms.v2.functional")
