"""The hand-off between benchmarks, models and the job: spans, evaluation items, window items, a selection.

Nothing here imports the rest of kamera: a benchmark loader (:mod:`kamera.data`), the toy tasks
(:mod:`kamera.toy`) and the window benchmarks produce these; adapters (:mod:`kamera.models`) encode
spans; the job (:mod:`kamera.job`) selects, keys and evaluates items.
"""

from kamera.items.eval import EvalItem
from kamera.items.selection import Selection
from kamera.items.spans import ROLES, Audio, Clip, Part, Role, Span, validate_spans
from kamera.items.window import WindowEntry, WindowItem

__all__ = ["ROLES", "Audio", "Clip", "EvalItem", "Part", "Role", "Selection", "Span", "WindowEntry", "WindowItem",
           "validate_spans"]
