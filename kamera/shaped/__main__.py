"""``python -m kamera.shaped`` runs ``python -m kamera.models.shaped``."""

import runpy

runpy.run_module("kamera.models.shaped", run_name="__main__", alter_sys=True)
