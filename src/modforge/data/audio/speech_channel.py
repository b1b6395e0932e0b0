"""The recording channel of the synthetic voice (:mod:`.speech_synth`): a per-speaker room impulse response,
microphone high-pass and mild EQ, a background noise floor at a per-utterance SNR, and the active speech level
those levels are measured against.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import signal

from .speech_speaker import Speaker

__all__ = ["Channel", "active_level", "apply_channel", "speaker_channel"]


@dataclass(frozen=True, eq=False)
class Channel:
    """A recording set-up: room impulse response and microphone/EQ filter.

    Args:
        room: room impulse response (direct path first).
        eq: second-order sections of the microphone high-pass and EQ.
    """

    room: np.ndarray
    eq: np.ndarray


def _peaking(freq: float, gain_db: float, q: float, sample_rate: int) -> np.ndarray:
    """RBJ audio-EQ-cookbook peaking biquad as one second-order section."""
    amp = 10.0 ** (gain_db / 40.0)
    w0 = 2.0 * np.pi * freq / sample_rate
    alpha = np.sin(w0) / (2.0 * q)
    b = np.array([1 + alpha * amp, -2 * np.cos(w0), 1 - alpha * amp])
    a = np.array([1 + alpha / amp, -2 * np.cos(w0), 1 - alpha / amp])
    return np.concatenate([b / a[0], a / a[0]])


@lru_cache(maxsize=256)
def speaker_channel(speaker: Speaker, sample_rate: int) -> Channel:
    """The speaker's recording channel, a deterministic function of ``speaker.channel_seed``."""
    rng = np.random.default_rng(speaker.channel_seed)
    rt60 = rng.uniform(0.08, 0.25)
    length = int(min(rt60, 0.35) * sample_rate)
    t = np.arange(length) / sample_rate
    room = np.zeros(length)
    room[0] = 1.0
    for _ in range(int(rng.integers(3, 7))):  # early reflections
        room[int(rng.uniform(0.002, 0.018) * sample_rate)] += rng.uniform(-0.45, 0.45)
    tail = rng.standard_normal(length) * np.exp(-6.9 * t / rt60)
    tail = signal.lfilter([1.0 - 0.5], [1.0, -0.5], tail)  # air absorption: the tail loses highs
    tail[: int(0.004 * sample_rate)] = 0.0
    drr_db = rng.uniform(12.0, 22.0)
    tail *= np.sqrt(np.sum(room**2) / max(np.sum(tail**2), 1e-12)) * 10.0 ** (-drr_db / 20.0)
    room += tail
    eq = [signal.butter(2, rng.uniform(60.0, 120.0), btype="highpass", fs=sample_rate, output="sos")[0]]
    for _ in range(2):
        eq.append(
            _peaking(rng.uniform(250.0, 0.3 * sample_rate), rng.uniform(-2.5, 2.5), rng.uniform(0.7, 2.0), sample_rate)
        )
    eq.append(_peaking(0.38 * sample_rate, rng.uniform(-3.0, 1.5), 0.6, sample_rate))  # presence / high roll-off
    channel = Channel(room=room.astype(np.float64), eq=np.array(eq))
    channel.room.setflags(write=False)
    channel.eq.setflags(write=False)
    return channel


def active_level(x: np.ndarray, sample_rate: int, floor_db: float = 35.0) -> float:
    """RMS over the 20 ms frames whose power is within ``floor_db`` of the loudest frame (an active speech level)."""
    frame = max(1, int(0.02 * sample_rate))
    n = (x.shape[-1] // frame) * frame
    if n == 0:
        return float(np.sqrt(np.mean(x**2)))
    power = np.mean(x[:n].reshape(-1, frame) ** 2, axis=1)
    active = power[power >= power.max() * 10.0 ** (-floor_db / 10.0)]
    return float(np.sqrt(np.mean(active))) if active.size else 0.0


def apply_channel(
    x: np.ndarray, speaker: Speaker, sample_rate: int, rng: np.random.Generator, snr_db: float | None = None
) -> np.ndarray:
    """Room, microphone/EQ and a background noise floor at ``snr_db`` (drawn in 30–50 dB when None)."""
    channel = speaker_channel(speaker, sample_rate)
    n = x.shape[-1]
    y = signal.fftconvolve(x, channel.room)[:n]
    y = signal.sosfilt(channel.eq.copy(), y)
    snr_db = rng.uniform(30.0, 50.0) if snr_db is None else snr_db
    noise = signal.lfilter([1.0], [1.0, -0.9], rng.standard_normal(n))
    noise *= active_level(y, sample_rate) * 10.0 ** (-snr_db / 20.0) / max(float(np.sqrt(np.mean(noise**2))), 1e-12)
    return y + noise
