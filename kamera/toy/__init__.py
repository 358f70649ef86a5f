"""The embedded toy binding model: a tiny decoder trained in-repo so reuse effects are measurable on CPU.

``kamera.toy.task`` generates the seeded binding items (``items(spec, kind, n, seed, variant)``),
``kamera.toy.model.load`` returns shipped weights in their adapter (``load()`` is the image variant,
registered as ``toy_binding``; ``load_text()`` the text one), ``python -m kamera.toy.train`` retrains
them and ``python -m kamera.toy.evaluate`` prints the per-arm table and the rank curve.

``kamera.toy.window_task`` cuts the same task into a stream of chunks for the window probes
(:mod:`kamera.window`); ``load_window()`` (registered as ``toy_window``) is the text decoder trained on
it (``python -m kamera.toy.train --variant window``), and ``make table1`` / ``make turnover`` draw its Table 1
and turnover curve (beside the tiny families').
"""
