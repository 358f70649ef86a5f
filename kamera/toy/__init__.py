"""The embedded toy binding model: a tiny decoder trained in-repo so reuse effects are measurable on CPU.

``kamera.toy.task`` generates the seeded binding items, ``kamera.toy.model.load`` returns the shipped
weights in their adapter (registered as ``toy_binding``), ``python -m kamera.toy.train`` retrains them
and ``python -m kamera.toy.evaluate`` prints the per-arm table and the rank curve.
"""
