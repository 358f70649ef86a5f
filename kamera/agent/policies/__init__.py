"""The replay policies (docs/agent.md), one file each behind :class:`~kamera.agent.policies.base.Policy`.

Importing this package imports every policy module, so :data:`POLICIES` lists them all (the ``policy`` kind of
:class:`kamera.reuse.plugin.Registry`); :func:`make_policy` builds one by name and knobs (conf/policy labels).
"""

from kamera.agent.policies.base import POLICIES, Policy, UnknownPolicyError, make_policy, register
from kamera.discover import import_all

import_all(__name__)  # every module registers its plugin (kamera.discover)

__all__ = ["POLICIES", "Policy", "UnknownPolicyError", "make_policy", "register"]
