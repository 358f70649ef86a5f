"""One job end to end: the runner (:mod:`~kamera.run.runner`), experiment tracking (:mod:`~kamera.run.track`)
and the Hydra entry point ``python -m kamera.run`` (:mod:`kamera.run.__main__`)."""
