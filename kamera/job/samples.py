"""Per-sample logs: beside each shard, ``<job key>.samples.jsonl``, one line per (item, arm), in the form
lmms-eval's ``--log_samples`` users read: what the model was shown and what it answered.

A line holds the item and arm, a digest of the inputs the model read (``input_sha256``: the token ids of every
span and the bytes of every image, frame and audio part), the prompt as text (media as ``<image>``, ``<video>``,
``<audio>`` placeholders, the chat template included), the choices, the gold answer, the arm's prediction,
the raw generated text (``scoring=generate`` and open answers; null when the answer is the logit argmax over
the choices), and the scores (correct, KL to re-prefill, η, the flip and whether it was recovered).

The file is derived from the shard's rows (which carry these columns) and rewritten whole, atomically, at the end
of every run of the job, so it always matches the rows: a killed run's finished rows get their lines at the next
run. Renderers never read it.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
from PIL import Image

from kamera.items.spans import Audio, Clip, Span
from kamera.job.store import Shard, atomic_write_text

PLACEHOLDERS = ((Image.Image, "<image>"), (Clip, "<video>"), (Audio, "<audio>"))
# the row columns a sample line carries, in this order (a shard written before a column existed gives null)
SAMPLE_COLUMNS = ("item_id", "subset", "arm", "knobs", "input_sha256", "prompt", "choices", "gold", "pred",
                  "generated", "scoring", "correct", "kl", "eta", "flip", "recovered")


def _placeholder(part: object) -> str:
    for kind, text in PLACEHOLDERS:
        if isinstance(part, kind):
            return text
    raise TypeError(f"a span part of type {type(part).__name__} has no placeholder")


def prompt_text(spans: list[Span]) -> str:
    """The spans as one text, each non-text part replaced by its placeholder."""
    return "".join(p if isinstance(p, str) else _placeholder(p) for s in spans for p in s.parts)


def _media_bytes(part: object) -> list[bytes]:
    if isinstance(part, Image.Image):
        return [f"{part.mode}{part.size}".encode(), part.tobytes()]
    if isinstance(part, Clip):
        return [b for f, t in zip(part.frames, part.timestamps, strict=True)
                for b in (str(t).encode(), *_media_bytes(f))]
    if isinstance(part, Audio):
        return [f"{part.sampling_rate}:{part.start_s}".encode(), np.ascontiguousarray(part.samples).tobytes()]
    return [part.encode()]


def input_digest(enc) -> str:
    """sha256 of what the model read: every span's role and token ids, and the content of each of its parts."""
    h = hashlib.sha256()
    for s in enc.spans:
        h.update(f"{s.role}\0".encode())
        h.update(s.input_ids.detach().cpu().numpy().astype(np.int64).tobytes())
        for part in s.span.parts:
            for b in _media_bytes(part):
                h.update(b)
    return h.hexdigest()


def sample_columns(enc, choices: list[str] | None) -> dict:
    """The columns an arm row carries for its sample line (the same for every arm of the item)."""
    return {"input_sha256": input_digest(enc), "prompt": prompt_text([s.span for s in enc.spans]),
            "choices": None if choices is None else json.dumps(list(choices))}


def samples_path(shard: Shard) -> Path:
    return shard.dir / f"{shard.key}.samples.jsonl"


def _plain(value: object) -> object:
    """A JSON-ready value: numpy scalars as Python ones, NaN as null."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_samples(shard: Shard) -> Path:
    """Rewrite ``<key>.samples.jsonl`` from the shard's rows (sorted by item and arm); its path."""
    rows = shard.rows()
    lines = []
    if len(rows):
        rows = rows.sort_values(["item_id", "arm"], kind="stable")
        for rec in rows.to_dict("records"):
            line = {c: _plain(rec.get(c)) for c in SAMPLE_COLUMNS}
            if isinstance(line["choices"], str):
                line["choices"] = json.loads(line["choices"])
            lines.append(json.dumps(line, ensure_ascii=False, default=str))
    path = samples_path(shard)
    atomic_write_text(path, "".join(f"{x}\n" for x in lines))
    return path
