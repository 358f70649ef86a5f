"""Alias of :mod:`kamera.models.shaped` (the shaped-checkpoint writers), kept so ``python -m kamera.shaped`` and
``python -m kamera.shaped.rehearse`` work as before; import from :mod:`kamera.models.shaped`."""
