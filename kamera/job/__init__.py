"""What a job is and what it keeps: its plugin lists (:mod:`~kamera.job.spec`), its checks
(:mod:`~kamera.job.checks`), its item shape, chosen once (:mod:`~kamera.job.shapes`: the :class:`JobShape` each
room declares beside what it drives, :mod:`kamera.arms.shape`, :mod:`kamera.window.shape`,
:mod:`kamera.agent.shape`, :mod:`kamera.engine.shape`), the data it reads (:mod:`~kamera.job.selection`), its
identity (:mod:`~kamera.job.identity`) and its results shard (:mod:`~kamera.job.store`).

A job is one model × one benchmark selection × a list of arms (and probes), of window probes, of policies, or of
arms served through an engine.
"""

from kamera.items.selection import Selection
from kamera.job.checks import (
    ATTENTION,
    CANONICAL_CONTEXTS,
    PREFLIGHT_SAMPLE,
    TRACKING,
    preflight,
    threads_for,
    validate,
)
from kamera.job.identity import (
    WEIGHT_SUFFIXES,
    checkpoint_fingerprint,
    config_identity,
    config_key,
    data_fingerprint,
    file_digest,
    identity,
    safetensors_header,
)
from kamera.job.selection import bench_root, read_benchmark
from kamera.job.shapes import job_specs, select, shape_of
from kamera.job.spec import CONF_DIR, DTYPES, JobError, Spec, build_specs, conf_labels, expected_of
from kamera.job.store import results_root

__all__ = [
    "ATTENTION", "CANONICAL_CONTEXTS", "CONF_DIR", "DTYPES", "PREFLIGHT_SAMPLE", "TRACKING", "WEIGHT_SUFFIXES",
    "JobError", "Selection", "Spec", "bench_root", "build_specs", "checkpoint_fingerprint", "conf_labels",
    "config_identity", "config_key", "data_fingerprint", "expected_of", "file_digest", "identity", "job_specs",
    "preflight", "read_benchmark", "results_root", "safetensors_header", "select", "shape_of",
    "threads_for", "validate",
]
