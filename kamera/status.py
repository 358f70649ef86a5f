"""``python -m kamera.status`` runs ``python -m kamera.sweep.status``."""

import runpy

if __name__ == "__main__":
    runpy.run_module("kamera.sweep.status", run_name="__main__", alter_sys=True)
