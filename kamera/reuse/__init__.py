"""An item's shared forwards, computed once and read by every arm and probe: the context
(:mod:`~kamera.reuse.context`: re-prefill, canonical KV(B|∅), R(δ)·KV(B|∅), KV(B|A), Δ, the patch, blind
reuse, the 4D-mask oracle), partial recompute of selected rows and layers (:mod:`~kamera.reuse.recompute`),
the plugin base arms and probes derive from (:mod:`~kamera.reuse.plugin`) and the forwards a plugin list
costs (:mod:`~kamera.reuse.forwards`)."""
