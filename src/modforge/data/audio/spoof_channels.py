"""Transmission conditions of the synthetic corpus's eval split: how ASVspoof 2021 LA/DF test channels.

Why: the field's headline numbers are per condition (ASVspoof 2021 LA's codecs C1–C7, DF's
compressions); a countermeasure trained on clean audio loses most where the channel changes.
The synthetic corpus therefore passes each eval utterance — bona fide and spoofed alike, so the
channel carries no label information — through one of these conditions, balanced over the classes,
and the test reports EER per attack × condition like the organisers' tables
(:mod:`modforge.tasks.spoofing.conditions`).

Each condition is NumPy/SciPy DSP drawn from the utterance's own generator, so a corpus stays
byte-identical for a seed on any machine and needs no optional codec library:

* ``none`` — the recording as rendered (ASVspoof 2021 LA's C1).
* ``telephone`` — an 8 kHz line, 300–3400 Hz, μ-law companding (C2/C5-like). Training's attack A03
  is a telephone codec too: a model that learned "narrow band = spoof" fails here, as 2021 showed.
* ``reverb`` — a far-field room: exponentially decaying noise tail (RT60 0.3–0.8 s) behind the direct
  path at a direct-to-reverberant ratio of −3 … +6 dB.
* ``noise`` — pink background noise at 5–15 dB SNR against the active speech level.

Applied before the corpus's common post-processing (level normalisation, dither, 16 bits), so levels
stay equal across conditions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import signal

from . import speech_synth as ss
from .spoof_attacks import telephone_line

__all__ = ["CHANNELS", "DEFAULT_EVAL_CHANNELS", "Channel", "apply_channel_condition", "check_channels"]


@dataclass(frozen=True)
class Channel:
    """One transmission condition: name, description, ``apply(x, sample_rate, rng) -> y`` (same length)."""

    name: str
    description: str
    apply: Callable[[np.ndarray, int, np.random.Generator], np.ndarray]


def _fit(y: np.ndarray, n: int) -> np.ndarray:
    return y[:n] if y.shape[-1] >= n else np.pad(y, (0, n - y.shape[-1]))


def _unchanged(x: np.ndarray, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    return x


def _telephone(x: np.ndarray, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    return _fit(telephone_line(x, sample_rate, rng), x.shape[-1])


def _reverb(x: np.ndarray, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    rt60 = rng.uniform(0.3, 0.8)
    drr_db = rng.uniform(-3.0, 6.0)
    pre_delay = int(rng.uniform(0.002, 0.008) * sample_rate)
    t = np.arange(int(rt60 * sample_rate)) / sample_rate
    tail = rng.standard_normal(t.size) * np.exp(-3.0 * np.log(10.0) * t / rt60)  # -60 dB at rt60
    tail *= 10.0 ** (-drr_db / 20.0) / max(float(np.sqrt(np.sum(tail**2))), 1e-12)
    response = np.concatenate([[1.0], np.zeros(pre_delay), tail])
    return signal.fftconvolve(x, response)[: x.shape[-1]]


def _pink(n: int, rng: np.random.Generator) -> np.ndarray:
    spectrum = np.fft.rfft(rng.standard_normal(n))
    spectrum[1:] /= np.sqrt(np.arange(1, spectrum.size))
    spectrum[0] = 0.0
    return np.fft.irfft(spectrum, n)


def _noise(x: np.ndarray, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    snr_db = rng.uniform(5.0, 15.0)
    noise = _pink(x.shape[-1], rng)
    noise *= ss.active_level(x, sample_rate) * 10.0 ** (-snr_db / 20.0) / max(float(np.sqrt(np.mean(noise**2))), 1e-12)
    return x + noise


CHANNELS: dict[str, Channel] = {
    c.name: c
    for c in (
        Channel("none", "the recording as rendered", _unchanged),
        Channel("telephone", "8 kHz line, 300-3400 Hz band, 7/8-bit mu-law companding", _telephone),
        Channel("reverb", "far-field room: RT60 0.3-0.8 s noise tail, direct-to-reverberant -3..+6 dB", _reverb),
        Channel("noise", "pink background noise at 5-15 dB SNR (active speech level)", _noise),
    )
}
"""The conditions, by name."""

DEFAULT_EVAL_CHANNELS: tuple[str, ...] = tuple(CHANNELS)
"""What ``make-spoof-corpus`` puts on the eval split unless told otherwise: every condition."""


def check_channels(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` as a tuple, or ValueError naming an unknown or repeated one and the known ones."""
    if isinstance(names, str):
        names = [n for n in names.split(",") if n]
    out = tuple(str(n) for n in names)
    if not out:
        raise ValueError(f"eval_channels must name at least one condition of: {', '.join(CHANNELS)}")
    unknown = [n for n in out if n not in CHANNELS]
    if unknown:
        raise ValueError(f"unknown eval channel {unknown[0]!r}; known: {', '.join(CHANNELS)}")
    if len(set(out)) != len(out):
        raise ValueError(f"eval_channels names a condition twice: {', '.join(out)}")
    return out


def apply_channel_condition(x: np.ndarray, name: str, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """``x`` through condition ``name`` (same length, float)."""
    return CHANNELS[name].apply(np.asarray(x, dtype=np.float64), sample_rate, rng)
