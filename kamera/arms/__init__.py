"""Reuse arms, one file each, registered by name (see ``base.register``).

Importing this package imports every arm module, so ``ARMS`` lists them all.
"""

from kamera.arms.base import ARMS, Arm, ArmOutput, ArmRefusal, UnknownArmError, make_arm, register
from kamera.discover import import_all

import_all(__name__)  # every module registers its plugin (kamera.discover)

__all__ = ["ARMS", "Arm", "ArmOutput", "ArmRefusal", "UnknownArmError", "make_arm", "register"]
