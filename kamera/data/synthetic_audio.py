"""``synthetic_audio``: the synthetic binding benchmark with an audio B chunk, generated in memory.

Each item: a short prefix; 1–3 A chunks of text ("Key k: the low tone means red; the noise burst means green.");
one B chunk ("Recording: " + a WAV of ``n_sounds`` sounds, each 0.4 s with 0.1 s of silence after it); a
multiple-choice question asking the colour of the sound at one place in the recording. B says which sound plays
there, A gives its colour, so neither chunk alone answers. Distractors are the colours of the other keyed sounds.

Sounds (``SOUNDS``, the labels): pure tones at 220 / 440 / 880 / 1760 Hz, a rising chirp (300 → 3000 Hz) and a
white-noise burst, each with 10-ms fades. The WAV (16-bit PCM, mono) is written at ``sample_rate`` (default
16 kHz) and read back through :func:`kamera.data.media.read_audio`, which resamples to 16 kHz: a test sets
another rate to exercise the resampling. Two sounds are about 1 s, 25 audio tokens on the Qwen2.5-Omni thinker.
Options: ``n_a_chunks`` (1–3), ``n_sounds`` (1–4), ``n_choices`` (2–6), ``sample_rate``, ``n_total``.
"""

from __future__ import annotations

import io
import random
import wave
from collections.abc import Iterator

import numpy as np

from kamera.data.base import LoadContext, check_within, generated_benchmark, generated_rows, letter_item
from kamera.data.schema import ChunkedItem, MediaRef, PromptTemplate, Unit, layout
from kamera.data.selection import Row
from kamera.data.synthetic import COLOURS

TONES = {"low tone": 220.0, "middle tone": 440.0, "high tone": 880.0, "very high tone": 1760.0}
SOUNDS = (*TONES, "rising chirp", "noise burst")
SOUND_S, GAP_S, FADE_S = 0.4, 0.1, 0.01
PLACES = ("first", "second", "third", "fourth")

PROMPT = PromptTemplate(
    source="harness-defined synthetic benchmark",
    prefix="Keys give each sound a colour; the recording plays sounds in turn.\n",
    question="\n{question}",
    post="\nAnswer with the option's letter.",
)


def sound(name: str, rate: int, seed: int) -> np.ndarray:
    """One labelled sound, ``SOUND_S`` long at ``rate`` Hz, amplitude 0.5, with linear fades."""
    t = np.arange(round(SOUND_S * rate)) / rate
    if name in TONES:
        x = np.sin(2 * np.pi * TONES[name] * t)
    elif name == "rising chirp":
        f0, f1 = 300.0, 3000.0
        x = np.sin(2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * SOUND_S)))
    elif name == "noise burst":
        x = np.random.default_rng(seed).uniform(-1, 1, t.size)
    else:
        raise ValueError(f"unknown sound {name!r}; known: {SOUNDS}")
    fade = np.minimum(1.0, np.minimum(t, SOUND_S - t) / FADE_S)
    return (0.5 * x * fade).astype(np.float32)


def recording(names: list[str], rate: int, seed: int) -> np.ndarray:
    """The sounds in turn, each followed by ``GAP_S`` of silence."""
    gap = np.zeros(round(GAP_S * rate), np.float32)
    return np.concatenate([piece for k, n in enumerate(names) for piece in (sound(n, rate, seed + k), gap)])


def wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    """Mono float samples in [-1, 1] as a 16-bit PCM WAV file (the stdlib ``wave`` writer)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def _build(ctx: LoadContext, index: int, n_a_chunks: int, n_sounds: int, n_choices: int, rate: int) -> ChunkedItem:
    rng = random.Random(f"synthetic_audio:{ctx.seed}:{index}")
    keyed = rng.sample(SOUNDS, min(len(SOUNDS), max(2 * n_a_chunks, n_sounds)))
    colours = dict(zip(keyed, rng.sample(list(COLOURS), len(keyed)), strict=True))
    played = rng.sample(keyed, n_sounds)
    target = rng.randrange(n_sounds)
    answer = colours[played[target]]
    others = [c for c in dict.fromkeys([*(colours[s] for s in keyed), *COLOURS]) if c != answer]
    options = [answer, *others[: n_choices - 1]]
    rng.shuffle(options)
    groups = [keyed[k::n_a_chunks] for k in range(n_a_chunks)]
    a_chunks = [
        ([Unit(f"Key {k + 1}: " + "; ".join(f"the {s} means {colours[s]}" for s in group) + ".\n")], False)
        for k, group in enumerate(groups)
    ]
    audio = MediaRef("audio", "recording", data=wav_bytes(recording(played, rate, rng.randrange(1 << 30)), rate))
    item = letter_item(
        ctx, index, segments=layout(PROMPT.prefix, a_chunks, [Unit("Recording: ", audio)]),
        question=f"What colour does the {PLACES[target]} sound of the recording mean?", options=options,
        answer=answer, prompt=PROMPT,
        meta={"bindings": colours, "played": played, "place": target, "answer_colour": answer, "sample_rate": rate},
    )
    item.validate(expected_media=["recording"])
    return item


def rows(
    ctx: LoadContext,
    *,
    n_a_chunks: int = 2,
    n_sounds: int = 2,
    n_choices: int = 4,
    sample_rate: int = 16000,
    n_total: int | None = None,
) -> Iterator[Row]:
    """``n_total`` generated rows (default: ``max(64, n_items)``), built lazily on selection."""
    check_within("n_a_chunks", n_a_chunks, 1, 3)
    check_within("n_sounds", n_sounds, 1, len(PLACES))
    check_within("n_choices", n_choices, 2, len(SOUNDS))
    if sample_rate < 8000:
        raise ValueError(f"sample_rate must be >= 8000 Hz (the highest tone is 1760 Hz), got {sample_rate}")
    return generated_rows(ctx, n_total, lambda i: _build(ctx, i, n_a_chunks, n_sounds, n_choices, sample_rate))

SPEC = generated_benchmark("synthetic_audio", rows)
