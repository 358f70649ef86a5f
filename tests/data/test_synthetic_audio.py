"""``synthetic_audio`` and the audio path of the data layer: labelled sounds, decoding with PyAV, resampling to
16 kHz mono, and the errors a bad audio input raises."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from kamera.data import load_items, score
from kamera.data.errors import MediaError
from kamera.data.media import AUDIO_RATE, read_audio
from kamera.data.schema import MediaRef
from kamera.data.synthetic_audio import GAP_S, SOUND_S, SOUNDS, TONES, recording, sound, wav_bytes
from kamera.items.spans import Audio


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.fft.rfftfreq(x.size, 1 / rate)[spectrum.argmax()])


def flatness(x: np.ndarray) -> float:
    """Spectral flatness (geometric over arithmetic mean of the power spectrum): ~0 for a tone, large for noise."""
    p = np.abs(np.fft.rfft(x)) ** 2 + 1e-12
    return float(np.exp(np.log(p).mean()) / p.mean())


def test_items_bind_text_keys_to_an_audio_b() -> None:
    for item in load_items("synthetic_audio", n_items=6, seed=3):
        spans = item.spans()
        assert [s.role for s in spans] == ["prefix", "A", "A", "B", "query"]
        assert all(isinstance(p, str) for s in spans if s.role != "B" for p in s.parts)
        audio = [p for p in spans[-2].parts if isinstance(p, Audio)]
        assert len(audio) == 1 and audio[0].sampling_rate == AUDIO_RATE
        assert audio[0].duration_s == pytest.approx(2 * (SOUND_S + GAP_S), abs=1e-3)
        played, bindings = item.meta["played"], item.meta["bindings"]
        assert item.choices[item.choice_letters.index(item.gold_letter)] == bindings[played[item.meta["place"]]]
        assert {c for s, c in bindings.items() if s != played[item.meta["place"]]} & set(item.choices)
        assert score(item, item.gold_letter) == 1.0


def test_deterministic_by_seed() -> None:
    a, b = load_items("synthetic_audio", n_items=3, seed=1), load_items("synthetic_audio", n_items=3, seed=1)
    assert [x.media_refs()[0].data for x in a] == [y.media_refs()[0].data for y in b]
    assert [x.render_text() for x in a] != [x.render_text() for x in load_items("synthetic_audio", n_items=3, seed=2)]


def test_each_sound_is_what_its_label_says() -> None:
    for name in SOUNDS:
        x = sound(name, AUDIO_RATE, seed=0)
        if name in TONES:
            assert peak_hz(x, AUDIO_RATE) == pytest.approx(TONES[name], abs=5)
            assert flatness(x) < 1e-3
        elif name == "noise burst":
            assert flatness(x) > 0.3
        else:  # the chirp rises: its second half peaks higher than its first
            half = x.size // 2
            assert peak_hz(x[half:], AUDIO_RATE) > 2 * peak_hz(x[:half], AUDIO_RATE)


def test_the_item_decodes_the_recording_it_labels() -> None:
    item = load_items("synthetic_audio", n_items=1, seed=5, n_sounds=3)[0]
    got = item.spans()[-2].parts[-1].samples
    step = round((SOUND_S + GAP_S) * AUDIO_RATE)
    for k, name in enumerate(item.meta["played"]):
        seg = got[k * step : k * step + round(SOUND_S * AUDIO_RATE)]
        if name in TONES:
            assert peak_hz(seg, AUDIO_RATE) == pytest.approx(TONES[name], abs=5)


def test_another_rate_is_resampled_to_16_khz_mono() -> None:
    """A 22.05 kHz recording and a 44.1 kHz stereo file both come back at 16 kHz, mono, the same length in time."""
    item = load_items("synthetic_audio", n_items=1, sample_rate=22050)[0]
    audio = item.spans()[-2].parts[-1]
    assert audio.sampling_rate == AUDIO_RATE and audio.duration_s == pytest.approx(1.0, abs=2e-3)
    tone = np.sin(2 * np.pi * 440 * np.arange(44100) / 44100).astype(np.float32) * 0.5
    buf = io.BytesIO()
    with av.open(buf, "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=44100, layout="stereo")
        frame = av.AudioFrame.from_ndarray((np.stack([tone, tone]).T.reshape(1, -1) * 32767).astype(np.int16),
                                           format="s16", layout="stereo")
        frame.sample_rate = 44100
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    mono = read_audio(buf.getvalue(), "stereo tone")
    assert mono.ndim == 1 and mono.size == pytest.approx(AUDIO_RATE, abs=32)
    assert peak_hz(mono, AUDIO_RATE) == pytest.approx(440, abs=3)
    part = read_audio(buf.getvalue(), "stereo tone", start_s=0.25, duration_s=0.5)
    assert part.size == AUDIO_RATE // 2


def test_bad_audio_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="audio file missing"):
        read_audio(tmp_path / "absent.wav", "absent")
    (tmp_path / "junk.wav").write_bytes(b"RIFF not really a wave file" * 4)
    with pytest.raises(MediaError, match="cannot decode audio"):
        MediaRef("audio", "junk", path=tmp_path / "junk.wav").load()
    wav = wav_bytes(recording(["low tone"], AUDIO_RATE, 0), AUDIO_RATE)
    with pytest.raises(MediaError, match="no audio samples"):
        read_audio(wav, "short", start_s=5.0)
    with pytest.raises(TypeError, match="1-D"):
        Audio(np.zeros((2, 10), np.float32), AUDIO_RATE)
    with pytest.raises(ValueError, match="n_sounds"):
        load_items("synthetic_audio", n_items=1, n_sounds=5)


def test_videomme_audio_option_makes_b_the_audio_track(tmp_path: Path) -> None:
    """audio=true: A keeps the first half's frames, B is the video's own sound from the middle of the sampled
    frames (the fixture's video v carries a 300 + 100·v Hz tone), and the job's media list names the video."""
    from kamera.data import make_fixture
    from kamera.data.base import media_files
    from kamera.items.spans import Clip

    root = make_fixture("videomme", tmp_path)
    items = load_items("videomme", root=root, subset="short", n_items=3, n_frames=8, audio=True, audio_seconds=1.5)
    for item in items:
        a, b = item.spans()[-3], item.spans()[-2]
        clip, audio = a.parts[0], b.parts[-1]
        assert isinstance(clip, Clip) and len(clip) == 4 and isinstance(audio, Audio)
        assert audio.start_s == item.meta["audio_b"]["start_s"] > clip.timestamps[-1]
        assert audio.duration_s == pytest.approx(1.5, abs=0.01)
        v = int(item.meta["videoID"][3:6])
        assert peak_hz(audio.samples, AUDIO_RATE) == pytest.approx(300 + 100 * v, abs=3)
    assert media_files(items) == [root / "data" / f"{i.meta['videoID']}.mp4" for i in items]
    frames_only = load_items("videomme", root=root, subset="short", n_items=1, n_frames=8)[0]
    assert isinstance(frames_only.spans()[-2].parts[0], Clip)
