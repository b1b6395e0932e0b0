"""Reading audio files: any format libsndfile reads (wav, flac, ogg...), mixed down to mono,
resampled to the rate the model expects, as float32 in [-1, 1].

Resampling is polyphase (``scipy.signal.resample_poly``) with the rational factor
reduced by the greatest common divisor, so 44.1 kHz → 16 kHz is exact (160/441) and
fast. Every failure is an :class:`AudioReadError` naming the file and what was wrong.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ...core.errors import UsageError

__all__ = ["AudioReadError", "audio_info", "read_audio", "resample"]

class AudioReadError(UsageError):
    """An audio file is missing or cannot be decoded (bad input: exit status 2)."""


def resample(wave: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """``wave`` (1-D) from ``source_rate`` to ``target_rate`` Hz (polyphase, anti-aliased)."""
    if source_rate == target_rate:
        return wave
    if source_rate <= 0 or target_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {source_rate} → {target_rate}")
    from scipy.signal import resample_poly

    g = math.gcd(int(source_rate), int(target_rate))
    return resample_poly(wave, target_rate // g, source_rate // g).astype(np.float32, copy=False)


def audio_info(path: str | Path) -> tuple[int, int]:
    """(frames, sample rate) of an audio file, without decoding it."""
    import soundfile as sf

    try:
        info = sf.info(str(path))
    except Exception as exc:  # soundfile raises RuntimeError/LibsndfileError/OSError
        raise AudioReadError(f"cannot read audio file {path}: {_reason(exc)}") from None
    return int(info.frames), int(info.samplerate)


def read_audio(path: str | Path, sample_rate: int | None = None) -> tuple[np.ndarray, int]:
    """Decode ``path`` into a mono float32 waveform.

    Args:
        path: the audio file.
        sample_rate: resample to this rate (None: keep the file's).

    Returns:
        ``(wave, rate)``; ``rate`` is ``sample_rate`` when given.

    Raises:
        AudioReadError: the file is missing, unreadable, empty or not finite.
    """
    import soundfile as sf

    path = Path(path)
    if not path.is_file():
        raise AudioReadError(f"audio file not found: {path}")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:
        raise AudioReadError(f"cannot read audio file {path}: {_reason(exc)}") from None
    if data.shape[0] == 0:
        raise AudioReadError(f"audio file {path} holds no samples")
    wave = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    if not np.isfinite(wave).all():
        raise AudioReadError(f"audio file {path} holds NaN or infinite samples")
    if sample_rate is not None and sample_rate != rate:
        wave, rate = resample(wave, rate, sample_rate), sample_rate
    return np.ascontiguousarray(wave, dtype=np.float32), int(rate)


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
