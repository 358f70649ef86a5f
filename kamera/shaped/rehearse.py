"""``python -m kamera.shaped.rehearse`` runs ``python -m kamera.sweep.rehearse``."""

import runpy

if __name__ == "__main__":
    runpy.run_module("kamera.sweep.rehearse", run_name="__main__", alter_sys=True)
