"""Triangular filterbanks on the STFT's frequency bins: mel (HTK or Slaney scale) and linear.

A filterbank is a ``[n_freqs, n_filters]`` matrix applied to a power spectrum ``[B, frames,
n_freqs]`` by a matrix product. Filter ``m`` is a triangle rising from edge ``m`` to a peak at
edge ``m + 1`` and falling to zero at edge ``m + 2``; the ``n_filters + 2`` edges are equally
spaced on the mel scale (:func:`mel_filterbank`) or in Hz (:func:`linear_filterbank`, the
LFCC filterbank of the ASVspoof baselines).

Mel scales:

* ``htk`` — ``m = 2595·log10(1 + f/700)`` (O'Shaughnessy 1987; HTK, torchaudio's default);
* ``slaney`` — linear below 1 kHz (``f / (200/3)``), logarithmic above (27 mels per factor 6.4),
  from Slaney's Auditory Toolbox (librosa's default).

``norm="slaney"`` scales each triangle to unit area (``2 / (f_hi - f_lo)``), as librosa does.
Built in float64 numpy, returned as float32 tensors.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

__all__ = [
    "MelNorm",
    "MelScale",
    "hz_to_mel",
    "linear_filterbank",
    "mel_filterbank",
    "mel_sinc_filters",
    "mel_to_hz",
    "triangular",
]

MelScale = Literal["htk", "slaney"]
MelNorm = Literal["none", "slaney"]

_SLANEY_F_SP = 200.0 / 3  # Hz per mel below 1 kHz
_SLANEY_MIN_LOG_HZ = 1000.0
_SLANEY_MIN_LOG_MEL = _SLANEY_MIN_LOG_HZ / _SLANEY_F_SP  # 15
_SLANEY_LOG_STEP = np.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray | float, scale: MelScale = "htk") -> np.ndarray:
    """Frequency in Hz → mels on ``scale``."""
    f = np.asarray(hz, dtype=np.float64)
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    _check_scale(scale)
    octaves = np.log(np.maximum(f, _SLANEY_MIN_LOG_HZ) / _SLANEY_MIN_LOG_HZ)
    log_part = _SLANEY_MIN_LOG_MEL + octaves / _SLANEY_LOG_STEP
    return np.where(f >= _SLANEY_MIN_LOG_HZ, log_part, f / _SLANEY_F_SP)


def mel_to_hz(mel: np.ndarray | float, scale: MelScale = "htk") -> np.ndarray:
    """Mels on ``scale`` → frequency in Hz (the inverse of :func:`hz_to_mel`)."""
    m = np.asarray(mel, dtype=np.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    _check_scale(scale)
    above = np.maximum(m, _SLANEY_MIN_LOG_MEL) - _SLANEY_MIN_LOG_MEL
    log_part = _SLANEY_MIN_LOG_HZ * np.exp(_SLANEY_LOG_STEP * above)
    return np.where(m >= _SLANEY_MIN_LOG_MEL, log_part, m * _SLANEY_F_SP)


def _check_scale(scale: str) -> None:
    if scale not in ("htk", "slaney"):
        raise ValueError(f"unknown mel scale '{scale}': expected 'htk' or 'slaney'")


def triangular(freqs: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Triangles over ``freqs`` (Hz, ``[n_freqs]``), one per consecutive triple of ``edges``:
    ``[n_freqs, len(edges) - 2]``."""
    lower = (freqs[:, None] - edges[None, :-2]) / (edges[1:-1] - edges[:-2])[None, :]
    upper = (edges[None, 2:] - freqs[:, None]) / (edges[2:] - edges[1:-1])[None, :]
    return np.maximum(0.0, np.minimum(lower, upper))


def _bin_frequencies(n_freqs: int, sample_rate: int) -> np.ndarray:
    return np.linspace(0.0, sample_rate / 2.0, n_freqs)


def _check_range(n_filters: int, f_min: float, f_max: float | None, sample_rate: int, what: str) -> float:
    nyquist = sample_rate / 2.0
    top = nyquist if f_max is None else float(f_max)
    if n_filters < 1:
        raise ValueError(f"{what} must be at least 1, got {n_filters}")
    if not 0.0 <= f_min < top <= nyquist:
        raise ValueError(
            f"need 0 <= f_min < f_max <= sample_rate / 2 = {nyquist:g} Hz, got f_min={f_min:g}, f_max={top:g}"
        )
    return top


def _checked(bank: np.ndarray, what: str, n_freqs: int) -> torch.Tensor:
    empty = np.flatnonzero(bank.max(axis=0) <= 0.0)
    if empty.size:
        raise ValueError(
            f"{what}: filter {int(empty[0])} covers no frequency bin of the {n_freqs}-bin spectrum; "
            "use fewer filters or a larger n_fft"
        )
    return torch.from_numpy(bank).float()


def mel_filterbank(
    n_freqs: int,
    sample_rate: int,
    n_mels: int,
    f_min: float = 0.0,
    f_max: float | None = None,
    scale: MelScale = "htk",
    norm: MelNorm = "none",
) -> torch.Tensor:
    """Mel filterbank ``[n_freqs, n_mels]`` for a one-sided spectrum of ``n_freqs`` bins.

    Raises:
        ValueError: a bad frequency range or scale, or a filter that covers no bin.
    """
    top = _check_range(n_mels, f_min, f_max, sample_rate, "n_mels")
    edges = mel_to_hz(np.linspace(hz_to_mel(f_min, scale), hz_to_mel(top, scale), n_mels + 2), scale)
    bank = triangular(_bin_frequencies(n_freqs, sample_rate), edges)
    if norm == "slaney":
        bank = bank * (2.0 / (edges[2:] - edges[:-2]))[None, :]
    elif norm != "none":
        raise ValueError(f"unknown mel norm '{norm}': expected 'none' or 'slaney'")
    return _checked(bank, f"mel filterbank ({n_mels} filters)", n_freqs)


def linear_filterbank(
    n_freqs: int, sample_rate: int, n_filters: int, f_min: float = 0.0, f_max: float | None = None
) -> torch.Tensor:
    """Linearly spaced triangular filterbank ``[n_freqs, n_filters]`` (the LFCC filterbank).

    Raises:
        ValueError: a bad frequency range, or a filter that covers no bin.
    """
    top = _check_range(n_filters, f_min, f_max, sample_rate, "n_filters")
    edges = np.linspace(f_min, top, n_filters + 2)
    bank = triangular(_bin_frequencies(n_freqs, sample_rate), edges)
    return _checked(bank, f"linear filterbank ({n_filters} filters)", n_freqs)


def mel_sinc_filters(count: int, kernel_size: int, sample_rate: int) -> torch.Tensor:
    """The fixed sinc filter bank of RawNet2 and AASIST, ``[count, K]`` (``K`` = ``kernel_size``
    made odd, as both references do: 1024 → 1025, 128 → 129).

    Band ``i`` passes ``[edge_i, edge_{i+1}]``, the edges being ``count + 1`` points equally
    spaced on the (HTK) mel scale from 0 Hz to ``sample_rate // 2``; its taps are
    ``2 f2/sr · sinc(2 f2 n/sr) − 2 f1/sr · sinc(2 f1 n/sr)`` for ``n = −(K−1)/2 … (K−1)/2``,
    times a Hamming window.
    """
    kernel = kernel_size + 1 if kernel_size % 2 == 0 else kernel_size
    edges = mel_to_hz(np.linspace(0.0, float(hz_to_mel(sample_rate // 2)), count + 1))
    taps = np.arange(kernel, dtype=np.float64) - (kernel - 1) / 2

    def low_pass(cutoff: np.ndarray) -> np.ndarray:  # ideal low-pass at ``cutoff`` Hz, one row per band
        return (2 * cutoff / sample_rate) * np.sinc(2 * cutoff * taps / sample_rate)

    band_pass = low_pass(edges[1:, None]) - low_pass(edges[:-1, None])
    return torch.as_tensor(band_pass * np.hamming(kernel), dtype=torch.float32)
