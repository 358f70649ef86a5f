"""Sweeps: Hydra's expansion of an experiment into jobs (:mod:`~kamera.sweep.expand`, ``python -m kamera.sweep``),
how far each job is (:mod:`~kamera.sweep.status`), what it costs on H100s (:mod:`~kamera.sweep.cost`) and the
end-to-end rehearsal on shaped checkpoints (:mod:`~kamera.sweep.rehearse`)."""

from kamera.sweep.expand import (
    SweepError,
    compose_config,
    composed,
    expand,
    main,
    manifest_line,
    paper_experiments,
)

__all__ = ["SweepError", "compose_config", "composed", "expand", "main", "manifest_line", "paper_experiments"]
