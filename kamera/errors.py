"""Errors that concern one item, not the job.

An :class:`ItemError` means this item cannot be evaluated as it stands. Raised by a benchmark loader
(one source row cannot become a valid item: a malformed field, no B chunk, a media count mismatch), the
loader turns it into a logged skip with the message as the reason; raised while a job evaluates an item
(a medium that does not decode, non-finite logits, an input the model cannot take), the runner records the
item as failed with the message, keeps going, and reports it: the job is then not complete, never silently
short. Anything else raised while evaluating an item is a bug and stops the job.
"""

from __future__ import annotations


class ItemError(ValueError, RuntimeError):
    """This item cannot be evaluated; the message says which item, which arm (if any) and why.

    A ValueError (a bad source row, as the loaders have always raised it) and a RuntimeError (a failure while
    evaluating, as the runner has always caught it); ``kamera.data.errors.ItemError`` is this class."""
