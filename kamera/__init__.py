"""kamera: a reproduction harness for position-invariant multimodal KV reuse (arXiv 2606.23581).

In a notebook::

    import kamera as km
    model = km.load_model("tiny_qwen2_5_vl")
    ctx = km.ReuseContext(model, [km.Span("prefix", ("Answer briefly.",)), km.Span("A", (img_a,)),
                                  km.Span("B", (img_b,)), km.Span("query", ("What colour ...?",))])
    canonical = ctx.canonical                        # KV(B|∅)
    blind = km.relocate(canonical, ctx.delta)        # R(δ)·KV(B|∅)
    patch = km.Patch.form(km.deficit(ctx.conditioned, blind)).truncate(16)
    logits = ctx.query(patch.apply(blind)).logits
    km.kl(ctx.reprefill_logits, logits), km.eta(km.kl(ctx.reprefill_logits, logits),
                                                km.kl(ctx.reprefill_logits, ctx.blind.logits))
"""

from kamera.core import ChunkKV, Deficit, Patch, deepest, deficit, orbit_mean, relocate
from kamera.items.spans import Span
from kamera.metrics import eta, kl
from kamera.models import load_model, model_names
from kamera.reuse.context import ReuseContext

__all__ = [
    "ChunkKV",
    "Deficit",
    "Patch",
    "ReuseContext",
    "Span",
    "deepest",
    "deficit",
    "eta",
    "kl",
    "load_model",
    "model_names",
    "orbit_mean",
    "relocate",
]
