"""Errors that concern one item, not the job.

An :class:`ItemError` means this item cannot be evaluated as it stands (a medium that does not
decode, non-finite logits, an input the model cannot take). The runner records the item as failed
with the message, keeps going, and reports it: the job is then not complete, never silently short.
Anything else raised while evaluating an item is a bug and stops the job.
"""

from __future__ import annotations


class ItemError(RuntimeError):
    """This item cannot be evaluated; the message says which item, which arm (if any) and why."""
