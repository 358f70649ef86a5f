"""Stand-in for torchvision in the SGLang CPU side venv (README.md beside it): module-level imports only."""

from torchvision import io, transforms  # noqa: F401
from torchvision._standin import missing

__version__ = "0.0+standin"  # below every release: transformers' version gates take the no-torchvision path
__getattr__ = missing("torchvision")
