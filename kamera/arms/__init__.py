"""Reuse arms, one file each, registered by name (see ``base.register``).

Importing this package imports every arm module, so ``ARMS`` lists them all.
"""

import importlib
import pkgutil

from kamera.arms.base import ARMS, Arm, ArmOutput, ArmRefusal, UnknownArmError, make_arm, register

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["ARMS", "Arm", "ArmOutput", "ArmRefusal", "UnknownArmError", "make_arm", "register"]
