"""``python -m kamera.models.cost`` runs ``python -m kamera.sweep.cost`` (the estimate reads sweeps, so it
lives above the models; the per-model FLOPs are :mod:`kamera.models.flops`)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("kamera.sweep.cost", run_name="__main__", alter_sys=True)
