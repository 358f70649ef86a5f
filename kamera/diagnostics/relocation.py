"""Fig. 12(b): relocation error against the model's own rotary, as a function of the distance moved.

B is prefilled alone at position 0 and, for each distance δ, alone again at δ (``canonical_context
= "none"``, so nothing but RoPE changes). Per layer and rotary channel:

    rel_err(δ) = ‖R(δ)·KV(B at 0) − KV(B at δ)‖_F / ‖KV(B at δ)‖_F

Layer 0 isolates relocation itself; deeper layers add the model's own attention rounding at other
absolute positions. The model forms p·θ in its own float precision, so the error grows with δ even
when R(δ) is exact (tests/test_operator.py bounds it). ``bf16_floor`` (float32 runs only) is the
error of merely storing the float32 prefill in bf16, ‖bf16(K) − K‖_F / ‖K‖_F: a relocated cache
within that floor is as exact as a bf16 cache can be. The figure's scheme is read off the model:

    rope_1d            1-D RoPE (Llama, DeepSeek, Kimi)
    mrope_sectioned    M-RoPE with contiguous t / h / w sections (Qwen2.5-VL)
    mrope_interleaved  M-RoPE with interleaved t / h / w pairs (Qwen3-VL, Qwen3-Omni)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kamera.core import ChunkKV, relocate
from kamera.diagnostics.common import frobenius, relative
from kamera.items.spans import Span
from kamera.knobs import check_counts
from kamera.models.base import Adapter, EncodedSpan

DISTANCES = (1, 10, 100, 1000, 10_000, 100_000)


def rope_scheme(adapter: Adapter) -> str:
    """"rope_1d", "mrope_sectioned" or "mrope_interleaved" (from the model's position rows and rope parameters)."""
    if adapter.position_rows == 1:
        return "rope_1d"
    params = getattr(adapter.text_config, "rope_parameters", None) or {}
    return "mrope_interleaved" if params.get("mrope_interleaved") or params.get("interleaved") else "mrope_sectioned"


def prefill_alone(adapter: Adapter, span: EncodedSpan, start: int) -> ChunkKV:
    """The span prefilled on its own from position ``start``."""
    out = adapter.forward([(span, start)], tag="probe_relocation")
    return adapter.read(out.cache, 0, span.n_tokens, span.local_pos + start)


def relocation_error(adapter: Adapter, span: Span | EncodedSpan, distances: Sequence[int] = DISTANCES) -> list[dict]:
    """Relative error of relocated keys vs keys prefilled at the new position, per distance and layer.

    Records: ``{scheme, pair_layout, dtype, distance, layer, channel, quantity, value}``; quantity
    ``"rel_err"`` or ``"bf16_floor"`` (float32 models only)."""
    distances = check_counts("relocation", "distances", distances)
    enc = span if isinstance(span, EncodedSpan) else adapter.encode_span(span)
    rotary = [(c, s) for c, s in enumerate(adapter.specs) if s.rotary is not None]
    base = prefill_alone(adapter, enc, 0)
    dtype = str(adapter.dtype).removeprefix("torch.")
    keys = {"scheme": rope_scheme(adapter), "pair_layout": rotary[0][1].rotary.layout, "dtype": dtype}
    out = []
    for d in distances:
        moved, target = relocate(base, d), prefill_alone(adapter, enc, d)
        for l in range(target.n_layers):
            for c, spec in rotary:
                t = target.layers[l][c]
                den = frobenius(t)
                rec = {**keys, "distance": d, "layer": l, "channel": spec.name}
                out.append({**rec, "quantity": "rel_err",
                            "value": relative(frobenius(moved.layers[l][c].double() - t.double()), den)})
                if t.dtype == torch.float32:
                    out.append({**rec, "quantity": "bf16_floor",
                                "value": relative(frobenius(t.bfloat16().double() - t.double()), den)})
    return out
