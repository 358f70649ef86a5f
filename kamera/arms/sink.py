"""The attention-sink prosthesis (Table 5, "attention-sink prosthesis (k = 32)"): recompute B's k sink tokens.

Source: the paper names the arm but gives no recipe, and no public code carries that name
(``docs/baselines.md`` §6). Our reading: when B is encoded on its own, its leading tokens
become the attention sinks of B's own tokens (StreamingLLM, ``mit-han-lab/streaming-llm``
enable_streaming_llm.py keeps the first tokens as sinks; MPIC §4.2 Insight 2: the first image
tokens act as sinks). The prosthesis re-anchors those sinks in the real context by recomputing the
leading k = 32 tokens of B at every layer. Mechanically this is the first-k carve
(:class:`~kamera.arms.first_k.FirstKArm`) at k = 32; it is kept as its own arm for Table 5's label and
default. The alternative reading, prepending k dummy sink tokens that are dropped at splice time
(EPIC's LegoLink-0), changes the canonical itself and is not what Table 5 compares.
"""

from __future__ import annotations

from dataclasses import dataclass

from kamera.arms.base import register
from kamera.arms.first_k import FirstKArm


@register
@dataclass
class SinkArm(FirstKArm):
    name = "sink"
    k: int = 32
