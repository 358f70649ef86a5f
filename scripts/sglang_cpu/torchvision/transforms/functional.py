"""Stand-in for torchvision.transforms.functional (scripts/sglang_cpu)."""

from torchvision._standin import missing

__getattr__ = missing("torchvision.transforms.functional")
