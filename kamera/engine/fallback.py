"""Load failures forced on purpose, and the check that each one is served exactly as if no reuse were asked for.

A connector that cannot serve a splice must recompute the request exactly or refuse it, never serve part of it
(the page without its patch, the segments that did load, a page read half-way). :data:`FAILURES` breaks one store
entry (a copy of a healthy one, under its own key) in each way a load can fail:

- **missing**: the entry is not in the store;
- **corrupt**: one byte of its tensor data flipped (the file still parses; only the entry's digest tells);
- **truncated**: the file cut in half (the safetensors reader refuses it);
- **other weights**: the entry names the served checkpoint and dtype with another weights digest
  (:func:`kamera.engine.store.model_id`), as a page captured before the checkpoint at that path was replaced does.

:func:`kamera.engine.verify.fallback_checks` applies each to the canonical page or the patch of a rank-m splice
and compares the greedy token and every next-token log-prob, byte for byte, with the same prompt sent with no
kamera parameters (the connector then takes no part); ``tests/engine/test_fallback.py`` also compares with an
engine built without the connector and forces a failure on the worker side (a page corrupted after the scheduler
checked it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from kamera.engine.store import checkpoint_of, entry_path


def _missing(path: Path) -> None:
    path.unlink()


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the last tensor's data: the header still parses
    path.write_bytes(bytes(data))


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _other_weights(path: Path) -> None:
    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()["kamera"])
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    meta["model"] = f"{checkpoint_of(meta['model'])}::{'0' * 16}"  # the same checkpoint path and dtype, other weights
    save_file(tensors, str(path), metadata={"kamera": json.dumps(meta)})


FAILURES: dict[str, Callable[[Path], None]] = {
    "missing": _missing,
    "corrupt": _corrupt,
    "truncated": _truncated,
    "other weights": _other_weights,
}
CAUSES = {  # what the fallback must name for each (a regular expression)
    "missing": "is not in the store",
    "corrupt": "is corrupt",
    "truncated": r"unreadable \(corrupt\)",
    "other weights": "captured from other weights",
}


def broken_copy(store: Path, key: str, failure: str, tag: str) -> str:
    """A copy of entry ``key`` under ``<key>-<tag>``, broken by ``FAILURES[failure]``; returns the copy's key."""
    if failure not in FAILURES:
        raise ValueError(f"unknown load failure {failure!r}; one of {sorted(FAILURES)}")
    copy = f"{key}-{tag}"
    shutil.copyfile(entry_path(store, key), entry_path(store, copy))
    FAILURES[failure](entry_path(store, copy))
    return copy


def identical(a, b) -> bool:
    """Two :class:`~kamera.engine.session.Output` s hold the same greedy token and bit-identical log-probs."""
    return a.token == b.token and torch.equal(a.logprobs, b.logprobs)


def cases() -> list[tuple[str, str]]:
    """(entry, failure) pairs the checks force: every failure on the page, and on the patch."""
    return [(entry, failure) for entry in ("page", "patch") for failure in FAILURES]
